// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libarchive, loaded on first use rather than linked (see common/lazy_library.h): its forwarders are
// in archive_lazy.cc. Call `archive_library().load()` before using it, for an error naming the fix.
#pragma once

#include "common/lazy_library.h"

namespace slipway::launcher {

LazyLibrary& archive_library();

}  // namespace slipway::launcher
