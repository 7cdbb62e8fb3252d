// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// How one rank's failure reaches every other rank with the culprit named (docs/errors.md, "Who
// failed"): the first rank to fail words a report naming itself and what it saw ("rank 6 on node
// n3 died"); the node's segment (ShmGroup::abort) and the ring's abort records (TcpRing::abort)
// carry that report verbatim, and every rank that learns of the failure from them throws it as a
// RelayedFailure, which is relayed on unchanged.
#pragma once

#include <string>

#include "libtrain/errors.h"

namespace libtrain::detail {

// A failure first seen by another rank: what() is that rank's report.
class RelayedFailure : public PeerError {
 public:
  using PeerError::PeerError;
};

// "rank 6 on node n3": how every message names a rank.
inline std::string rank_on_node(int rank, const std::string& node) {
  return "rank " + std::to_string(rank) + " on node " + node;
}

// "libtrain: rank 4 on node n2 reported: <what without its leading 'libtrain: '>".
inline std::string failure_report(const std::string& reporter, const std::string& what) {
  const std::string prefix = "libtrain: ";
  std::string rest = what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
  return prefix + reporter + " reported: " + rest;
}

}  // namespace libtrain::detail
