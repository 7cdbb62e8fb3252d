// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Communicator::Engine: the synchronous, hierarchical collectives (shared memory in the node,
// TCP ring between node leaders) and the failure state. Runs only on the worker thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "libtrain/communicator.h"
#include "shm_group.h"
#include "tcp_ring.h"

namespace libtrain {

class Communicator::Engine {
 public:
  Engine(Store& store, int rank, int size, const std::string& node, const CommunicatorOptions& opts);
  ~Engine();
  const Topology& topology() const { return topo_; }

  // Each runs the whole collective; on any error the engine is broken for good (errors.md).
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op);
  void broadcast(void* data, size_t count, DataType dtype, int root);
  void allgather(const void* in, void* out, size_t count, DataType dtype);
  void barrier();

 private:
  void discover(Store& store, const std::string& node);
  void connect(Store& store);
  size_t slot_bytes() const;
  template <typename Fn> void guarded(const detail::OpHeader& h, Fn&& body);
  template <typename Fn> void on_ring(Fn&& body);
  void agree(const detail::OpHeader& h);
  void hierarchical_allreduce(void* data, size_t count, DataType dtype, ReduceOp op);
  void fail(const std::string& why, const std::string& report) noexcept;

  Topology topo_;
  CommunicatorOptions opts_;
  std::vector<int> local_ranks_;  // global ranks on my node, ascending (local rank = index)
  std::vector<int> leaders_;      // lowest global rank of each node, ascending (node index = index)
  std::vector<std::string> nodes_;  // node name of each global rank
  std::unique_ptr<detail::ShmGroup> shm_;
  std::unique_ptr<detail::TcpRing> ring_;
  uint64_t seq_ = 0;
  std::string broken_;
};

}  // namespace libtrain
