// TcpRing: the node leaders' ring across nodes. Each member connects to the next and accepts
// from the previous; allreduce is reduce-scatter then allgather (each member sends and receives
// 2(n-1)/n of the buffer), with reduction of each chunk as soon as it has arrived.
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
  TcpRing(Store& store, int rank, std::vector<int> members, bool same_node, Seconds timeout);
  // Phase 2: after publish(): connect to the next member, accept the previous one.
  void connect(Store& store);

  // Every member checks its neighbour's header; a mismatch throws MismatchError here and makes
  // the rest of the ring fail with PeerError when this rank closes its links.
  void agree(const OpHeader& mine);
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op);  // kAverage sums only
  void close();
  int size() const { return static_cast<int>(members_.size()); }

 private:
  Clock::time_point deadline() const;
  std::string name(int index) const;
  void step(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
            const std::function<void(size_t)>& on_recv);

  int rank_;
  int index_;  // my position in members_
  std::vector<int> members_;
  bool same_node_;
  Seconds timeout_;
  int port_ = 0;
  Fd listen_, next_, prev_;
  std::vector<uint8_t> scratch_;
};

}  // namespace libtrain::detail
