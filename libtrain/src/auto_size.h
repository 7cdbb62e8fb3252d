// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// kAuto for the transports: a size knob set to it is chosen from the job's shape. It is the value
// of the public libtrain::kAuto that CommunicatorOptions carries (engine.cc checks that they are
// equal), kept here so that the transports need not include the front end's communicator.h.
#pragma once

#include <cstddef>

namespace libtrain::detail {

inline constexpr size_t kAuto = ~size_t{0};

}  // namespace libtrain::detail
