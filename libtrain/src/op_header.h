// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The op header: what a rank says it is about to do, which every rank of a collective must agree
// on. Both transports carry it (ShmGroup through its segment, TcpRing ahead of its first message)
// and describe() words it for MismatchError; it is the one type they share, kept here so that
// neither transport's header depends on the other's.
#pragma once

#include <cstdint>
#include <string>

namespace libtrain::detail {

enum class Collective : uint8_t { kAllreduce, kBroadcast, kAllgather, kBarrier };

struct OpHeader {
  uint64_t seq = 0;
  uint64_t count = 0;
  uint8_t kind = 0;  // Collective
  uint8_t dtype = 0;
  uint8_t op = 0;
  int32_t root = 0;
  bool operator==(const OpHeader&) const = default;
};

// "allreduce(count=4, dtype=float32, op=sum, root=0) #7"; fields out of range (a peer's garbage)
// read "?" or "unknown", never past a name table.
std::string describe(const OpHeader& h);

}  // namespace libtrain::detail
