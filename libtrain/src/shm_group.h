// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// ShmGroup: the ranks of one node and the shared-memory segment they use for collectives.
// One POSIX shm segment per communicator: a header (barrier, abort flag, per-rank op headers,
// pids, CPU masks, buffer addresses) and per rank two slots (double buffering lets chunk k+1
// fill while chunk k drains). Large collectives may skip the slots: with cross-memory attach
// (CMA, process_vm_readv(2)) each rank reads its peers' buffers directly, one copy instead of
// three. shm_group.cc holds the segment and its barrier, shm_collectives.cc the algorithms.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "libtrain/store.h"
#include "libtrain/types.h"
#include "op_header.h"
#include "shm_segment.h"

namespace libtrain::detail {

constexpr int kMaxLocalRanks = 512;

// [begin, end) of part `i` when `n` elements are split into `parts` near-equal parts.
inline void split(size_t n, int parts, int i, size_t& begin, size_t& end) {
  size_t p = static_cast<size_t>(parts), k = static_cast<size_t>(i);
  begin = n * k / p;
  end = n * (k + 1) / p;
}

// The knobs of CommunicatorOptions that the group needs once every rank has attached.
constexpr size_t kAutoSlotBytes = 512 << 10;
constexpr size_t kOversubscribedChunk = 256 << 10;

struct ShmTuning {
  size_t chunk_bytes = 0;      // kAuto: the slot, 256 KiB when oversubscribed
  size_t one_phase_bytes = 0;  // kAuto: 16 KiB, 0 when oversubscribed
  int64_t yield_us = 0;        // oversubscribed only: sched_yield this long before the futex
  int compute_threads = 0;     // threads this rank computes with beside libtrain's (0: unknown)
  size_t cma_min_bytes = 0;    // 0: never CMA
};

class ShmGroup {
 public:
  // The leader (local rank 0) creates the segment; the others open the name it published. A
  // constructor that throws leaves no name behind (ShmSegment).
  static std::string create_name();
  ShmGroup(const std::string& name, bool create, int local_rank, int local_size, size_t slot_bytes,
           Seconds timeout);
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Waits until every local rank has mapped the segment, then the leader unlinks its name so a
  // crash leaves nothing behind in /dev/shm. Every rank then sees whether the node's ranks
  // outnumber the CPUs they may run on (the union of their affinity masks), which picks the
  // waiting strategy and the automatic one-phase size, and probes CMA to every peer (when
  // `cma_min_bytes` > 0); collectives of at least that many bytes use it when all ranks can.
  void wait_attached(const ShmTuning& tuning);

  // Whether a waiting rank gives its CPU away instead of spinning: the ranks outnumber their
  // CPUs, or would with each rank's compute threads (ShmTuning::compute_threads) counted, so a
  // spinning waiter takes the CPU of a compute thread (set by wait_attached).
  bool shares_cpus() const { return shares_cpus_; }

  // Publishes my header; the next barrier() checks every rank's and throws MismatchError (on
  // every rank) when any differs. finish() runs that barrier if the collective moved no data.
  void agree(const OpHeader& mine);
  void finish();
  void barrier();
  // Marks the group failed with `why` (a report, failure.h); every rank's next or current wait
  // throws it as a RelayedFailure. The first abort's report stays.
  void abort(const std::string& why) noexcept;
  // How errors name the group's ranks: global rank and node (failure.h); default "local rank i".
  void set_identity(std::vector<int> global_ranks, std::string node);
  // While true, this rank waits on something with a timeout of its own (the leader on the ring):
  // a peer that times out waiting for it leaves the timeout and its report to this rank, whose
  // report names the rank that really hung.
  void set_busy_elsewhere(bool busy) noexcept;

  // kAverage sums only; `divisor` > 1 divides each finished piece of the sum (apply_average)
  // before anyone copies it. Chunks up to the one-phase size take one barrier: every rank reduces
  // the whole chunk from all slots; larger ones take two: each reduces its 1/n slice, all copy
  // out. A rank's own input is read from its buffer, never staged in its slot.
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op, int divisor = 1);
  void broadcast(void* data, size_t bytes, int root);
  void allgather(const void* in, void* out, size_t bytes);

  int local_rank() const { return rank_; }
  int local_size() const { return size_; }

 private:
  struct Header;
  uint8_t* slot(int rank, int buf) const;
  void wait_generation(uint32_t gen);
  void check_peers();
  std::string who(int local) const;
  [[noreturn]] void throw_dead(int local) const;
  [[noreturn]] void throw_stalled() const;
  std::vector<int> laggards() const;
  void check_headers();
  void probe_cma(bool wanted);
  void read_peer(int peer, uint64_t remote, void* local, size_t bytes);
  bool is_cma(size_t bytes) const { return use_cma_ && bytes >= cma_min_bytes_; }
  void publish_address(const void* p);
  uint64_t hdr_addr(int rank) const;  // what `rank` published
  void allreduce_cma(void* data, size_t count, DataType dtype, ReduceOp op, int divisor);
  void reduce_one_phase(uint8_t* in, size_t len, int buf, DataType dtype, ReduceOp op, int divisor);
  void reduce_two_phase(uint8_t* in, size_t len, int buf, DataType dtype, ReduceOp op, int divisor);
  void find_oversubscription();
  int next_buffer() { return static_cast<int>(chunk_seq_++ & 1); }

  ShmSegment segment_;
  Header* hdr_ = nullptr;  // the segment's start
  uint8_t* base_ = nullptr;  // its first slot
  size_t slot_bytes_;
  size_t chunk_bytes_;  // allreduce's pipeline chunk, at most slot_bytes_
  int rank_, size_;
  Seconds timeout_;
  uint64_t chunk_seq_ = 0;  // slots alternate across chunks *and* collectives (see shm_group.cc)
  const OpHeader* pending_ = nullptr;
  size_t one_phase_bytes_ = 0;  // set by wait_attached
  bool oversubscribed_ = false;
  bool shares_cpus_ = false;
  int cpus_ = 0;  // the CPUs the node's ranks may run on (the union of their masks)
  std::chrono::microseconds yield_{0};
  bool use_cma_ = false;
  size_t cma_min_bytes_ = 0;
  std::vector<uint8_t> scratch_;  // CMA: peers' chunks, read here and reduced into mine
  uint32_t barriers_ = 0;          // barriers this rank entered (Header::entered)
  std::vector<int> global_ranks_;  // set_identity
  std::string node_;
};

}  // namespace libtrain::detail
