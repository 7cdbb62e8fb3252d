// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// TcpRing: the node leaders' ring across nodes. Each member connects to the next and accepts
// from the previous; allreduce is reduce-scatter then allgather (each member sends and receives
// 2(n-1)/n of the buffer) as one stream each way: each chunk is reduced as soon as it has
// arrived, and each message leaves as soon as the one it depends on is in. Small buffers,
// where the 2(n-1) message latencies cost more than the bytes, are instead passed whole around the
// ring (n-1 steps) and reduced by every member in ring order. Each collective's op header goes
// ahead of its first message, so agreeing costs no round trip of its own.
// A member that fails sends its report (failure.h) to both neighbours before it closes its links:
// backwards on the unused direction of the data link from its previous member, forwards on a
// second connection to the next one that carries nothing else. A member whose link broke reads
// the report from that side and throws it, or, when the side closed without one, names that
// neighbour as the one that died.
#pragma once

#include <string>
#include <vector>

#include "libtrain/errors.h"
#include "libtrain/store.h"
#include "libtrain/types.h"
#include "op_header.h"
#include "socket.h"

namespace libtrain::detail {

// Where segment m of n of the reduce-scatter begins, in elements: about count * m / n, on a
// multiple of kWireAlign bytes (socket.h); segment n begins at count.
size_t ring_segment_begin(size_t count, size_t n, size_t m, size_t esize);

// The op header as it travels: kWireAlign bytes, so the data after it stays aligned (socket.h).
struct WireHeader {
  OpHeader op;
  char pad[kWireAlign - sizeof(OpHeader)];
};
static_assert(sizeof(WireHeader) == kWireAlign);

class TcpRing {
 public:
  // Phase 1: listen and publish "tcp/<rank>" in `store` (before the store's publish()).
  // `nodes`: each member's node name, for messages. `whole_bytes`: buffers up to this size go
  // around whole (kAuto: see is_whole in tcp_ring.cc). `spin_us`: how long a wait polls before
  // it sleeps (socket.h, Waiting).
  TcpRing(Store& store, int rank, std::vector<int> members, std::vector<std::string> nodes,
          bool same_node, Seconds timeout, size_t whole_bytes, int64_t spin_us);
  // Phase 2: after publish(): connect to the next member, accept the previous one.
  void connect(Store& store);

  // Sends my op header to the next member; the collective's first step receives the previous
  // member's (finish() does when the collective sent nothing) and throws MismatchError when it
  // differs, which makes the rest of the ring fail with PeerError when this rank closes its links.
  void agree(const OpHeader& mine);
  // kAverage sums only; `divisor` > 1 divides each finished piece of the sum (apply_average)
  // before it is passed on.
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op, int divisor = 1);
  void finish();
  // Sends `report` to both neighbours (best effort, never blocks), then closes every link.
  void abort(const std::string& report) noexcept;
  void close();
  int size() const { return static_cast<int>(members_.size()); }

 private:
  Clock::time_point deadline() const;
  Waiting waiting() const { return {deadline(), spin_}; }
  std::string name(int index) const;
  template <typename Fn> void guarded(Fn&& body);
  [[noreturn]] void explain();
  void step(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
            const std::function<void(size_t)>& on_recv);
  void check_header(const OpHeader& theirs);
  bool is_whole(size_t bytes) const;
  void allreduce_whole(void* data, size_t count, DataType dtype, ReduceOp op, int divisor);
  void reduce_scatter_allgather(void* data, size_t count, DataType dtype, ReduceOp op, int divisor);
  uint8_t* scratch(size_t bytes);

  int rank_;
  int index_;  // my position in members_
  std::vector<int> members_;
  std::vector<std::string> nodes_;
  bool same_node_;
  Seconds timeout_;
  size_t whole_bytes_;
  std::chrono::microseconds spin_;
  int port_ = 0;
  Fd listen_, next_, prev_;
  Fd report_next_, report_prev_;  // the second connections, for abort reports only
  OpHeader mine_{};
  WireHeader theirs_{};
  bool header_due_ = false;  // the previous member's header for mine_ is still to be received
  std::vector<uint8_t> scratch_;
};

}  // namespace libtrain::detail
