// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Communicator: the collectives of one group of ranks. Inside a node the ranks share one memory
// segment; across nodes the node leaders form a TCP ring (hierarchical: reduce in the node, ring
// across nodes, broadcast back). Every collective runs on one background thread in call order,
// so the *_async forms overlap communication with the caller's computation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "libtrain/store.h"
#include "libtrain/types.h"

namespace libtrain {

class Timeline;

// "Choose from the job's shape" for the sizes below.
inline constexpr size_t kAuto = ~size_t{0};

struct CommunicatorOptions {
  Seconds timeout{300.0};            // LIBTRAIN_TIMEOUT: no wait lasts longer
  // LIBTRAIN_SHM_CHUNK: per-rank slot (pipeline chunk). kAuto: 512 KiB slots (a chunk, its
  // slot and the slices read stay in L2); allreduce pipelines 256 KiB chunks in them when the node's ranks
  // outnumber its CPUs (then two ranks share each core's cache).
  size_t shm_chunk_bytes = kAuto;
  // LIBTRAIN_SHM_ONE_PHASE: chunks up to this many bytes take 1 barrier (every rank reduces the
  // whole chunk). kAuto: 16 KiB, or 0 when the node's ranks outnumber its CPUs (there the
  // n-fold reduction work costs more than the second barrier).
  size_t shm_one_phase_bytes = kAuto;
  // LIBTRAIN_SHM_YIELD_US: when the node's ranks outnumber its CPUs, a rank waiting at a barrier
  // gives its CPU away with sched_yield for up to this long before sleeping on a futex.
  int64_t shm_yield_us = 20000;
  // LIBTRAIN_RING_WHOLE: across nodes, buffers up to this many bytes go around the ring whole
  // (n-1 message latencies instead of 2(n-1), n-1 times the bytes). kAuto: up to 64 KiB while
  // the extra bytes stay under 256 KiB. Like the shm sizes, it must be the same on every rank.
  size_t ring_whole_bytes = kAuto;
  // LIBTRAIN_RING_SPIN_US: a leader waiting on its ring sockets polls (yielding its CPU between
  // polls) for up to this long before it sleeps in poll(2) (a woken thread starts late on VMs).
  int64_t ring_spin_us = 2000;
  // LIBTRAIN_COMPUTE_THREADS: threads each rank computes with beside libtrain's (torch's intra-op
  // threads; libtrain.torch passes torch.get_num_threads()). 0: unknown. When the node's ranks
  // times (these + libtrain's thread) outnumber their CPUs, waiters in the node yield their CPU
  // instead of spinning (as when the ranks alone outnumber them).
  int compute_threads = 0;
  size_t cma_min_bytes = 0;  // LIBTRAIN_CMA_MIN: in-node collectives from this size read peers'
                             // buffers with process_vm_readv; 0 = never (the default: slower
                             // than the cache-resident slots where measured, bench/allreduce)
  std::string prefix = "libtrain";   // store namespace; distinct per communicator sharing a store
  std::shared_ptr<Timeline> timeline;  // LIBTRAIN_TIMELINE: records every collective when set
  static CommunicatorOptions from_env();
};

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int node_index = 0, node_count = 1;
};

// Completion of an asynchronous collective. wait() rethrows the collective's error.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  void wait();
  bool is_done() const;

 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  // Collective over all `size` ranks: every rank constructs one with the same store and prefix.
  // `node`: ranks with equal node names use shared memory between them.
  Communicator(std::shared_ptr<Store> store, int rank, int size, const std::string& node,
               CommunicatorOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const Topology& topology() const { return topo_; }
  int rank() const { return topo_.rank; }
  int size() const { return topo_.size; }
  int local_rank() const { return topo_.local_rank; }
  int local_size() const { return topo_.local_size; }

  // In place. Buffers must stay valid until the Work completes.
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op);
  Work allreduce_async(void* data, size_t count, DataType dtype, ReduceOp op, std::string name = {});
  void broadcast(void* data, size_t count, DataType dtype, int root);
  Work broadcast_async(void* data, size_t count, DataType dtype, int root, std::string name = {});
  // out holds size() * count elements, rank r's contribution at r * count.
  void allgather(const void* in, void* out, size_t count, DataType dtype);
  Work allgather_async(const void* in, void* out, size_t count, DataType dtype, std::string name = {});
  void barrier();

 private:
  class Engine;
  class Worker;
  Work run(std::string name, const std::string& args, std::function<void()> body);
  void run_sync(std::string name, const std::string& args, std::function<void()> body);

  Topology topo_;
  std::shared_ptr<Timeline> timeline_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Worker> worker_;  // declared last: destroyed (drained) first
};

}  // namespace libtrain
