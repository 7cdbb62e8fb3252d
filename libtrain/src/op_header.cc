// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// describe(): the op header in words, for the MismatchError of either transport.
#include "op_header.h"

#include "libtrain/types.h"

namespace libtrain::detail {

std::string describe(const OpHeader& h) {
  static const char* const kKinds[] = {"allreduce", "broadcast", "allgather", "barrier"};
  return std::string(h.kind < 4 ? kKinds[h.kind] : "?") + "(count=" + std::to_string(h.count) +
         ", dtype=" + dtype_name(static_cast<DataType>(h.dtype)) + ", op=" +
         op_name(static_cast<ReduceOp>(h.op)) + ", root=" + std::to_string(h.root) + ") #" +
         std::to_string(h.seq);
}

}  // namespace libtrain::detail
