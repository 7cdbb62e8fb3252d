// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Engine: topology discovery through the store, transport setup, and the collectives composed
// from the node's shared memory (ShmGroup) and the leaders' ring (TcpRing). Broadcast and
// allgather across nodes reuse the allreduce path with a bitwise OR over bytes (non-contributors
// send zeros), which is exact for every dtype.
#include "engine.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "auto_size.h"
#include "failure.h"
#include "libtrain/errors.h"

namespace libtrain {

using detail::Collective;
using detail::OpHeader;
static_assert(detail::kAuto == kAuto, "the transports' kAuto (auto_size.h) is the public one");

Communicator::Engine::Engine(Store& store, int rank, int size, const std::string& node,
                             const CommunicatorOptions& opts)
    : opts_(opts) {
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument("libtrain: rank " + std::to_string(rank) + " outside a world of " +
                          std::to_string(size));
  topo_.rank = rank;
  topo_.size = size;
  discover(store, node);
  connect(store);
}

Communicator::Engine::~Engine() = default;

void Communicator::Engine::discover(Store& store, const std::string& node) {
  store.set("node/" + std::to_string(topo_.rank), to_bytes(node));
  store.publish(opts_.timeout);
  std::map<std::string, std::vector<int>> by_node;
  for (int r = 0; r < topo_.size; ++r) {
    std::string name = to_string(store.get("node/" + std::to_string(r), opts_.timeout));
    by_node[name].push_back(r);  // ranks ascend, so each list is sorted
    if (by_node[name].size() == 1) leaders_.push_back(r);
    nodes_.push_back(name);
  }
  local_ranks_ = by_node[node];
  topo_.local_size = static_cast<int>(local_ranks_.size());
  topo_.local_rank = static_cast<int>(std::find(local_ranks_.begin(), local_ranks_.end(), topo_.rank) -
                                      local_ranks_.begin());
  topo_.node_count = static_cast<int>(leaders_.size());
  topo_.node_index = static_cast<int>(std::find(leaders_.begin(), leaders_.end(), local_ranks_[0]) -
                                      leaders_.begin());
}

void Communicator::Engine::connect(Store& store) {
  bool leader = topo_.local_rank == 0;
  std::string key = "shm/" + std::to_string(local_ranks_[0]);
  if (topo_.local_size > 1 && leader) {
    std::string name = detail::ShmGroup::create_name();
    shm_ = std::make_unique<detail::ShmGroup>(name, true, 0, topo_.local_size, slot_bytes(), opts_.timeout);
    store.set(key, to_bytes(name));
  }
  if (topo_.node_count > 1 && leader) {
    std::vector<std::string> leader_nodes;
    for (int r : leaders_) leader_nodes.push_back(nodes_[static_cast<size_t>(r)]);
    ring_ = std::make_unique<detail::TcpRing>(store, topo_.rank, leaders_, std::move(leader_nodes), false,
                                              opts_.timeout, opts_.ring_whole_bytes, opts_.ring_spin_us);
  }
  store.publish(opts_.timeout);
  if (topo_.local_size > 1 && !leader)
    shm_ = std::make_unique<detail::ShmGroup>(to_string(store.get(key, opts_.timeout)), false,
                                              topo_.local_rank, topo_.local_size, slot_bytes(),
                                              opts_.timeout);
  if (ring_) ring_->connect(store);
  if (shm_) shm_->set_identity(local_ranks_, nodes_[static_cast<size_t>(topo_.rank)]);
  if (shm_)
    shm_->wait_attached({opts_.shm_chunk_bytes, opts_.shm_one_phase_bytes, opts_.shm_yield_us,
                         opts_.compute_threads, opts_.cma_min_bytes});
}

size_t Communicator::Engine::slot_bytes() const {
  return opts_.shm_chunk_bytes == kAuto ? detail::kAutoSlotBytes : opts_.shm_chunk_bytes;
}

// Runs a leader's ring part with its node's ranks told so (ShmGroup::set_busy_elsewhere).
template <typename Fn>
void Communicator::Engine::on_ring(Fn&& body) {
  if (shm_) shm_->set_busy_elsewhere(true);
  struct Done {
    detail::ShmGroup* shm;
    ~Done() { if (shm) shm->set_busy_elsewhere(false); }
  } done{shm_.get()};
  body();
}

// `report` (failure.h) goes to the node's other ranks and to the neighbouring node leaders.
void Communicator::Engine::fail(const std::string& why, const std::string& report) noexcept {
  if (broken_.empty()) broken_ = why;
  if (shm_) shm_->abort(report);
  if (ring_) ring_->abort(report);
}

// The first rank to fail reports what it saw under its own name; a rank that learned of a failure
// from another rank's report passes that report on unchanged, so every rank's error names the
// rank that saw the failure first and the culprit it saw (docs/errors.md, "Who failed").
template <typename Fn>
void Communicator::Engine::guarded(const OpHeader& h, Fn&& body) {
  if (!broken_.empty())
    throw PeerError("libtrain: the communicator failed earlier (" + broken_ +
                    "); create a new one");
  try {
    agree(h);
    body();
    if (shm_) shm_->finish();  // the header checks, when the collective moved no data
    if (ring_) on_ring([&] { ring_->finish(); });
  } catch (const detail::RelayedFailure& e) {
    fail(e.what(), e.what());
    throw;
  } catch (const std::exception& e) {
    size_t me = static_cast<size_t>(topo_.rank);
    fail(e.what(), detail::failure_report(detail::rank_on_node(topo_.rank, nodes_[me]), e.what()));
    throw;
  }
}

void Communicator::Engine::agree(const OpHeader& h) {
  if (shm_) shm_->agree(h);
  if (ring_) ring_->agree(h);
}

// kAverage sums, and the stage that finishes each piece of the sum divides that piece while it is
// in cache (the ring across nodes, else the node's shared memory): no pass over the whole buffer
// follows, and the division's arithmetic is apply_average()'s, on the same sums.
void Communicator::Engine::hierarchical_allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  int divisor = 1;
  if (op == ReduceOp::kAverage) {
    op = ReduceOp::kSum;
    divisor = topo_.size;
  }
  if (shm_) shm_->allreduce(data, count, dtype, op, topo_.node_count > 1 ? 1 : divisor);
  if (ring_) on_ring([&] { ring_->allreduce(data, count, dtype, op, divisor); });
  if (shm_ && topo_.node_count > 1) shm_->broadcast(data, count * dtype_size(dtype), 0);
}

void Communicator::Engine::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  check_op(dtype, op);
  OpHeader h{++seq_, count, static_cast<uint8_t>(Collective::kAllreduce),
             static_cast<uint8_t>(dtype), static_cast<uint8_t>(op), 0};
  guarded(h, [&] { hierarchical_allreduce(data, count, dtype, op); });
}

void Communicator::Engine::broadcast(void* data, size_t count, DataType dtype, int root) {
  if (root < 0 || root >= topo_.size)
    throw InvalidArgument("libtrain: broadcast root " + std::to_string(root) + " outside a world of " +
                          std::to_string(topo_.size));
  size_t bytes = count * dtype_size(dtype);
  OpHeader h{++seq_, count, static_cast<uint8_t>(Collective::kBroadcast), static_cast<uint8_t>(dtype),
             0, root};
  guarded(h, [&] {
    if (topo_.node_count == 1) {
      if (shm_) shm_->broadcast(data, bytes, root);  // one node: local rank == global rank
      return;
    }
    if (topo_.rank != root && bytes) std::memset(data, 0, bytes);
    hierarchical_allreduce(data, bytes, DataType::kUint8, ReduceOp::kBitOr);
  });
}

void Communicator::Engine::allgather(const void* in, void* out, size_t count, DataType dtype) {
  size_t bytes = count * dtype_size(dtype);
  OpHeader h{++seq_, count, static_cast<uint8_t>(Collective::kAllgather), static_cast<uint8_t>(dtype),
             0, 0};
  guarded(h, [&] {
    auto* o = static_cast<uint8_t*>(out);
    if (topo_.node_count == 1 && shm_) return shm_->allgather(in, out, bytes);
    size_t total = bytes * static_cast<size_t>(topo_.size), mine = bytes * static_cast<size_t>(topo_.rank);
    if (in != o + mine) {
      if (total) std::memset(o, 0, total);
      if (bytes) std::memmove(o + mine, in, bytes);
    } else {
      if (mine) std::memset(o, 0, mine);
      if (total > mine + bytes) std::memset(o + mine + bytes, 0, total - mine - bytes);
    }
    hierarchical_allreduce(out, total, DataType::kUint8, ReduceOp::kBitOr);
  });
}

void Communicator::Engine::barrier() {
  OpHeader h{++seq_, 0, static_cast<uint8_t>(Collective::kBarrier), 0, 0, 0};
  guarded(h, [&] {
    if (topo_.node_count == 1) return;  // agree() was the node barrier
    std::vector<uint8_t> token(static_cast<size_t>(topo_.node_count), 1);
    hierarchical_allreduce(token.data(), token.size(), DataType::kUint8, ReduceOp::kBitOr);
  });
}

}  // namespace libtrain
