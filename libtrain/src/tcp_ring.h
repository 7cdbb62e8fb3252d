// TcpRing: the node leaders' ring across nodes. Each member connects to the next and accepts
// from the previous; allreduce is reduce-scatter then allgather (each member sends and receives
// 2(n-1)/n of the buffer), with reduction of each chunk as soon as it has arrived. Small buffers,
// where the 2(n-1) message latencies cost more than the bytes, are instead passed whole around the
// ring (n-1 steps) and reduced by every member in ring order. Each collective's op header goes
// ahead of its first message, so agreeing costs no round trip of its own.
#pragma once

#include <string>
#include <vector>

#include "libtrain/store.h"
#include "libtrain/types.h"
#include "shm_group.h"
#include "socket.h"

namespace libtrain::detail {

class TcpRing {
 public:
  // Phase 1: listen and publish "tcp/<rank>" in `store` (before the store's publish()).
  // `whole_bytes`: buffers up to this size go around whole (kAuto: see is_whole in tcp_ring.cc).
  TcpRing(Store& store, int rank, std::vector<int> members, bool same_node, Seconds timeout,
          size_t whole_bytes);
  // Phase 2: after publish(): connect to the next member, accept the previous one.
  void connect(Store& store);

  // Sends my op header to the next member; the collective's first step receives the previous
  // member's (finish() does when the collective sent nothing) and throws MismatchError when it
  // differs, which makes the rest of the ring fail with PeerError when this rank closes its links.
  void agree(const OpHeader& mine);
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op);  // kAverage sums only
  void finish();
  void close();
  int size() const { return static_cast<int>(members_.size()); }

 private:
  Clock::time_point deadline() const;
  std::string name(int index) const;
  void step(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
            const std::function<void(size_t)>& on_recv);
  void check_header(const OpHeader& theirs);
  bool is_whole(size_t bytes) const;
  void allreduce_whole(void* data, size_t count, DataType dtype, ReduceOp op);
  void reduce_scatter_allgather(void* data, size_t count, DataType dtype, ReduceOp op);

  int rank_;
  int index_;  // my position in members_
  std::vector<int> members_;
  bool same_node_;
  Seconds timeout_;
  size_t whole_bytes_;
  int port_ = 0;
  Fd listen_, next_, prev_;
  OpHeader mine_{}, theirs_{};
  bool header_due_ = false;  // the previous member's header for mine_ is still to be received
  std::vector<uint8_t> scratch_;
};

}  // namespace libtrain::detail
