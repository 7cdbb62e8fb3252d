// ShmGroup: the ranks of one node and the shared-memory segment they use for collectives.
// One POSIX shm segment per communicator: a header (barrier, abort flag, per-rank op headers,
// pids, buffer addresses) and per rank two slots (double buffering lets chunk k+1 fill while
// chunk k drains). Large collectives skip the slots: with cross-memory attach (CMA,
// process_vm_readv(2)) each rank reads its peers' buffers directly, one copy instead of three.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "libtrain/store.h"
#include "libtrain/types.h"

namespace libtrain::detail {

// What a rank says it is about to do; all ranks of a collective must agree.
struct OpHeader {
  uint64_t seq = 0;
  uint64_t count = 0;
  uint8_t kind = 0;  // Collective kind (engine.h)
  uint8_t dtype = 0;
  uint8_t op = 0;
  int32_t root = 0;
  bool operator==(const OpHeader&) const = default;
};
std::string describe(const OpHeader& h);

class ShmGroup {
 public:
  // The leader (local rank 0) creates the segment; the others open the name it published.
  static std::string create_name();
  ShmGroup(const std::string& name, bool create, int local_rank, int local_size, size_t slot_bytes,
           Seconds timeout);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Waits until every local rank has mapped the segment, then the leader unlinks its name so a
  // crash leaves nothing behind in /dev/shm. Then every rank probes CMA to every peer (when
  // `cma_min_bytes` > 0); collectives of at least that many bytes use it when all ranks can.
  void wait_attached(size_t cma_min_bytes = 0);
  bool uses_cma() const { return use_cma_; }

  // Publishes my header; the next barrier() checks every rank's and throws MismatchError (on
  // every rank) when any differs. finish() runs that barrier if the collective moved no data.
  void agree(const OpHeader& mine);
  void finish();
  void barrier();
  // Marks the group failed with `why`; every rank's next or current wait throws PeerError.
  void abort(const std::string& why) noexcept;

  // kAverage sums only. Chunks up to `one_phase_bytes` take one barrier: every rank reduces the
  // whole chunk from all slots; larger ones take two: each reduces its 1/n slice, all copy out.
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op);
  void set_one_phase_bytes(size_t bytes) { one_phase_bytes_ = bytes; }
  void broadcast(void* data, size_t bytes, int root);
  void allgather(const void* in, void* out, size_t bytes);

  int local_rank() const { return rank_; }
  int local_size() const { return size_; }

 private:
  struct Header;
  uint8_t* slot(int rank, int buf) const;
  void wait_generation(uint32_t gen);
  void check_peers();
  void check_headers();
  void probe_cma(bool wanted);
  void read_peer(int peer, uint64_t remote, void* local, size_t bytes);
  bool is_cma(size_t bytes) const { return use_cma_ && bytes >= cma_min_bytes_; }
  void publish_address(const void* p);
  void allreduce_cma(void* data, size_t count, DataType dtype, ReduceOp op);
  int next_buffer() { return static_cast<int>(chunk_seq_++ & 1); }

  Header* hdr_ = nullptr;
  uint8_t* base_ = nullptr;
  size_t map_bytes_ = 0;
  size_t slot_bytes_;
  int rank_, size_;
  Seconds timeout_;
  std::string name_;
  bool owner_;
  uint64_t chunk_seq_ = 0;  // slots alternate across chunks *and* collectives (see shm_group.cc)
  const OpHeader* pending_ = nullptr;
  size_t one_phase_bytes_ = 64 * 1024;
  bool use_cma_ = false;
  size_t cma_min_bytes_ = 0;
  std::vector<uint8_t> scratch_;  // CMA: peers' chunks, read here and reduced into mine
};

}  // namespace libtrain::detail
