// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// TcpRing setup (address exchange through the store, a hello/ack handshake that rejects strays)
// and the pipelined ring allreduce.
#include "tcp_ring.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "auto_size.h"
#include "failure.h"
#include "libtrain/errors.h"

namespace libtrain::detail {
namespace {

constexpr uint32_t kMagic = 0x4c545247;  // "LTRG"
// Received data is reduced in pieces of this size as it arrives: small enough that the last
// piece, reduced after the step's transfer ends, delays the next step little (64 KiB measured
// no worse than 256 KiB at every size, and shorter tails at 256 KiB to 4 MiB).
constexpr size_t kReduceChunk = 64 * 1024;
// A message whose bytes are still being reduced or received leaves in pieces of at least this
// much (then its rest): with 2 leaders at 1 MiB, sending every 64 KiB as it was reduced measured
// 0.92x OpenMPI (median of 6 interleaved runs), 256 KiB pieces 1.17x, the step-by-step ring 1.02x.
constexpr size_t kStreamPiece = 256 * 1024;
constexpr int kMaxRingWhole = 64;  // members up to which small buffers may go around whole
constexpr size_t kAutoWholeBytes = 64 * 1024;
constexpr size_t kAutoWholeExtra = 256 * 1024;  // bytes more than the reduce-scatter sends

// Which of the two connections to the next member a hello opens.
enum Channel : int32_t { kData = 0, kReports = 1 };

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t channel;
  char pad[kWireAlign - 12];  // keeps the stream aligned (socket.h)
};

// A failing member's report (failure.h), as TcpRing::abort sends it.
constexpr uint32_t kReportMagic = 0x4c545250;  // "LTRP"
constexpr size_t kReportBytes = 1024;
struct Report {
  uint32_t magic;
  uint32_t len;
  char text[kReportBytes - 8];
};
static_assert(sizeof(Report) == kReportBytes);
// How long a member whose link broke waits for its neighbours' reports: they are sent before the
// links close, so they are there at once unless the neighbour is alive and well (it then has
// none, and the error stands as it is).
constexpr auto kReportWait = std::chrono::milliseconds(1000);

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

// Segments start at multiples of kWireAlign bytes from the buffer's start, so every message
// leaves from and lands at the same alignment as the buffer itself.
size_t ring_segment_begin(size_t count, size_t n, size_t m, size_t esize) {
  if (m >= n) return count;
  size_t grain = kWireAlign % esize == 0 ? kWireAlign / esize : 1;
  return count * m / n / grain * grain;
}

TcpRing::TcpRing(Store& store, int rank, std::vector<int> members, std::vector<std::string> nodes,
                 bool same_node, Seconds timeout, size_t whole_bytes, int64_t spin_us)
    : rank_(rank), members_(std::move(members)), nodes_(std::move(nodes)), same_node_(same_node),
      timeout_(timeout), whole_bytes_(whole_bytes), spin_(spin_us) {
  index_ = static_cast<int>(std::find(members_.begin(), members_.end(), rank) - members_.begin());
  listen_ = listen_tcp(port_);
  std::vector<std::string> addrs = local_addresses();
  if (same_node_) std::rotate(addrs.begin(), addrs.end() - 1, addrs.end());  // loopback first
  std::string value = std::to_string(port_);
  for (const auto& a : addrs) value += "," + a;
  store.set("tcp/" + std::to_string(rank_), to_bytes(value));
}

Clock::time_point TcpRing::deadline() const {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
}

std::string TcpRing::name(int index) const {
  auto i = static_cast<size_t>(index);
  return i < nodes_.size() ? rank_on_node(members_[i], nodes_[i])
                           : "rank " + std::to_string(members_[i]);
}

// Two connections to the next member (data, then reports) and two from the previous one,
// accepted in whichever order they come.
void TcpRing::connect(Store& store) {
  int n = size(), next = (index_ + 1) % n, prev = (index_ + n - 1) % n;
  auto parts = split_list(to_string(store.get("tcp/" + std::to_string(members_[next]), timeout_)));
  int port = std::stoi(parts.at(0));
  Hello hello{kMagic, rank_, kData, {}}, report_hello{kMagic, rank_, kReports, {}};
  std::string host = parts.at(1);
  for (size_t i = 1; i < parts.size() && !next_.valid(); ++i) {
    next_ = try_connect_tcp(parts[i], port, 2000);
    if (next_.valid()) set_nodelay_nonblock(next_.get());
    if (next_.valid()) host = parts[i];
  }
  if (!next_.valid()) next_ = connect_tcp(host, port, deadline());
  send_all(next_.get(), &hello, sizeof(hello), deadline(), name(next));
  report_next_ = connect_tcp(host, port, deadline());
  send_all(report_next_.get(), &report_hello, sizeof(report_hello), deadline(), name(next));
  while (!prev_.valid() || !report_prev_.valid()) {  // until the previous member's two hellos
    Fd fd = accept_tcp(listen_.get(), deadline());
    Hello got{};
    recv_all(fd.get(), &got, sizeof(got), deadline(), "a connecting rank");
    if (got.magic != kMagic || got.rank != members_[prev]) continue;
    if (got.channel == kData && !prev_.valid()) prev_ = std::move(fd);
    else if (got.channel == kReports && !report_prev_.valid()) report_prev_ = std::move(fd);
  }
  send_all(prev_.get(), &hello, sizeof(hello), deadline(), name(prev));
  Hello ack{};
  recv_all(next_.get(), &ack, sizeof(ack), deadline(), name(next));
  if (ack.magic != kMagic || ack.rank != members_[next])
    throw PeerError("libtrain: the address published by " + name(next) + " reached another process");
  listen_.reset();
}

void TcpRing::close() {
  next_.reset();
  prev_.reset();
  report_next_.reset();
  report_prev_.reset();
  listen_.reset();
}

// The report goes backwards on prev_ (whose direction towards the previous member carries nothing
// else) and forwards on report_next_; both sockets' send buffers are empty, so it fits at once.
// FIN follows it on every link; prev_'s unread data is drained first, as closing a socket with
// unread data sends a reset that could overtake the report.
void TcpRing::abort(const std::string& report) noexcept {
  Report r{};
  r.magic = kReportMagic;
  r.len = static_cast<uint32_t>(std::min(report.size(), sizeof(r.text)));
  std::memcpy(r.text, report.data(), r.len);
  for (const Fd* fd : {&prev_, &report_next_})
    if (fd->valid()) (void)!::send(fd->get(), &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT);
  for (const Fd* fd : {&next_, &report_next_, &prev_})
    if (fd->valid()) ::shutdown(fd->get(), SHUT_WR);
  char sink[4096];
  for (int i = 0; i < 256 && prev_.valid(); ++i)
    if (::recv(prev_.get(), sink, sizeof(sink), MSG_DONTWAIT) <= 0) break;
  close();
}

// Runs a collective's ring part; a broken link is explained by the neighbours' reports.
template <typename Fn>
void TcpRing::guarded(Fn&& body) {
  try {
    body();
  } catch (const MismatchError&) {
    throw;
  } catch (const Error&) {
    explain();
  }
}

// After an error broke the ring: throws the first report a neighbour sent (RelayedFailure); else,
// when a neighbour's links closed without one, a PeerError naming it as dead; else the error.
// Reports come from the previous member on report_prev_ and from the next one on next_.
void TcpRing::explain() {
  int n = size();
  struct Side {
    int fd, index;
    Report r{};
    size_t got = 0;
    bool closed = false;
  } sides[2] = {{report_prev_.get(), (index_ + n - 1) % n}, {next_.get(), (index_ + 1) % n}};
  auto until = Clock::now() + std::min(std::chrono::duration_cast<Clock::duration>(kReportWait),
                                       std::chrono::duration_cast<Clock::duration>(timeout_));
  for (;;) {
    for (Side& side : sides) {
      while (side.fd >= 0 && !side.closed && side.got < sizeof(side.r)) {
        ssize_t k = ::recv(side.fd, reinterpret_cast<char*>(&side.r) + side.got, sizeof(side.r) - side.got,
                           MSG_DONTWAIT);
        if (k > 0) side.got += static_cast<size_t>(k);
        else if (k < 0 && errno == EINTR) continue;
        else if (k < 0 && errno == EAGAIN) break;
        else side.closed = true;
      }
      if (side.got == sizeof(side.r) && side.r.magic == kReportMagic)
        throw RelayedFailure(std::string(side.r.text, std::min<size_t>(side.r.len, sizeof(side.r.text))));
    }
    for (const Side& side : sides)
      if (side.closed)
        throw PeerError("libtrain: " + name(side.index) + " died or lost its network: its ring links "
                        "closed without a report");
    int ms = ms_left(until);
    if (ms <= 0) break;
    pollfd p[2] = {{sides[0].fd, POLLIN, 0}, {sides[1].fd, POLLIN, 0}};
    if (::poll(p, 2, ms) < 0 && errno != EINTR) break;
  }
  throw;  // the error as it was: explain() runs inside its catch block
}

// One ring step: send to the next member while receiving from the previous one. The first step
// of a collective also receives the previous member's op header, ahead of its data, and checks it
// before any of the data is used.
void TcpRing::step(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                   const std::function<void(size_t)>& on_recv) {
  int n = size();
  Incoming in;
  if (header_due_) {
    in.prefix = &theirs_;
    in.prefix_len = sizeof(theirs_);
    in.on_prefix = [this] { check_header(theirs_.op); };
  }
  in.body = recv;
  in.body_len = recv_bytes;
  in.on_body = on_recv;
  in.pad = wire_pad(recv_bytes);
  exchange(next_.get(), Outgoing{send, send_bytes, wire_pad(send_bytes)}, prev_.get(), in, waiting(),
           name((index_ + 1) % n), name((index_ + n - 1) % n));
}

void TcpRing::check_header(const OpHeader& theirs) {
  header_due_ = false;
  if (!(theirs == mine_))
    throw MismatchError("libtrain: ranks disagree on the collective: this rank called " +
                        describe(mine_) + ", " + name((index_ + size() - 1) % size()) + " called " +
                        describe(theirs));
}

void TcpRing::agree(const OpHeader& mine) {
  if (!next_.valid()) throw PeerError("libtrain: the communicator failed earlier; create a new one");
  mine_ = mine;
  WireHeader wire{mine, {}};
  guarded([&] { send_all(next_.get(), &wire, sizeof(wire), waiting(), name((index_ + 1) % size())); });
  header_due_ = true;
}

void TcpRing::finish() {
  if (!header_due_) return;
  guarded([&] {
    recv_all(prev_.get(), &theirs_, sizeof(theirs_), waiting(), name((index_ + size() - 1) % size()));
    check_header(theirs_.op);
  });
}

void TcpRing::allreduce(void* data, size_t count, DataType dtype, ReduceOp op, int divisor) {
  if (size() == 1 || count == 0) return;  // the engine makes a ring of 2 node leaders or more
  guarded([&] {
    if (is_whole(count * dtype_size(dtype))) allreduce_whole(data, count, dtype, op, divisor);
    else reduce_scatter_allgather(data, count, dtype, op, divisor);
  });
}

// Passing the whole buffer takes n-1 message latencies instead of 2(n-1), but each member sends
// (n-1) S bytes instead of 2(n-1)/n S. With 2 members the bytes are the same, but the reduction
// cannot overlap the transfer (the buffer being sent is the one reduced into): measured over veth
// between sandbox nodes, whole was 1.3-2.5x faster up to 64 KiB and 1.1-1.5x slower from 256 KiB.
bool TcpRing::is_whole(size_t bytes) const {
  size_t n = members_.size();
  if (n > static_cast<size_t>(kMaxRingWhole)) return false;
  if (whole_bytes_ != kAuto) return bytes <= whole_bytes_;
  // The extra bytes a member sends: (n-1) S - 2(n-1)/n S.
  return bytes <= kAutoWholeBytes && bytes * (n - 1) * (n - 2) <= kAutoWholeExtra * n;
}

// n-1 steps: each member forwards what it received in the step before (its own buffer first),
// keeping every member's buffer in scratch; then all reduce the n buffers in ring order, so every
// member computes the same sums in the same order and gets bit-identical results.
void TcpRing::allreduce_whole(void* data, size_t count, DataType dtype, ReduceOp op, int divisor) {
  int n = size();
  size_t bytes = count * dtype_size(dtype), stride = bytes + wire_pad(bytes);
  uint8_t* slots = scratch(stride * static_cast<size_t>(n));
  auto piece = [&](int m) {
    m = (m % n + n) % n;
    return m == index_ ? static_cast<uint8_t*>(data) : slots + stride * static_cast<size_t>(m);
  };
  for (int s = 0; s < n - 1; ++s) step(piece(index_ - s), bytes, piece(index_ - s - 1), bytes, nullptr);
  const void* inputs[kMaxRingWhole];
  for (int m = 0; m < n; ++m) inputs[m] = piece(m);
  reduce_many(data, inputs, n, count, dtype, op);  // in place: the kernels read a block first
  apply_average(data, count, dtype, divisor);
}

// The reduce-scatter and the allgather as one full-duplex stream of 2(n-1) messages each way.
// Outgoing message m+1 carries the segment that incoming message m brings (reduced into the
// buffer during the reduce-scatter, as received during the allgather), so its bytes may leave as
// soon as those of m are done: no step waits for the one before it to end, and both directions
// of each link stay busy. Every message is padded to kWireAlign bytes (socket.h); the first
// incoming one follows the previous member's op header when that is due, checked before any of
// its data is used.
void TcpRing::reduce_scatter_allgather(void* data, size_t count, DataType dtype, ReduceOp op, int divisor) {
  const int n = size(), msgs = 2 * (n - 1);
  const size_t esize = dtype_size(dtype), cnt = static_cast<size_t>(n);
  auto seg = [&](int s) { return static_cast<size_t>((s % n + n) % n); };
  auto seg_begin = [&](int s) { return ring_segment_begin(count, cnt, seg(s), esize) * esize; };  // bytes
  auto seg_len = [&](int s) { return ring_segment_begin(count, cnt, seg(s) + 1, esize) * esize - seg_begin(s); };
  auto out_seg = [&](int m) { return m < n - 1 ? index_ - m : index_ + 1 - (m - (n - 1)); };
  auto in_seg = [&](int m) { return m < n - 1 ? index_ - m - 1 : index_ - (m - (n - 1)); };
  size_t longest = 0;
  for (int m = 0; m < n; ++m) longest = std::max(longest, seg_len(m));
  uint8_t* incoming = scratch(longest);
  auto* base = static_cast<uint8_t*>(data);
  const size_t prefix0 = header_due_ ? sizeof(theirs_) : 0;
  const std::string next_name = name((index_ + 1) % n), prev_name = name((index_ + n - 1) % n);
  char sink[kWireAlign];  // where received padding goes

  int in_m = 0, out_m = 0;         // the messages in flight each way
  size_t in_got = 0, out_sent = 0;  // their bytes so far, header and padding included
  size_t done = 0;                  // body bytes of incoming message in_m reduced or received
  // Body bytes of outgoing message out_m that may leave now.
  auto out_ready = [&]() -> size_t {
    int needs = out_m - 1;  // the incoming message that brings them
    if (out_m == 0 || needs < in_m) return seg_len(out_seg(out_m));
    return needs == in_m ? done : 0;
  };
  // After more of incoming message in_m arrived: reduce whole kReduceChunk pieces (and the tail
  // once all is in) during the reduce-scatter; during the allgather it is in place already. The
  // last reduce-scatter message finishes this member's segment: each piece of it is divided
  // (an average) before the allgather's first message sends it on.
  auto absorb = [&](size_t body_got, bool complete) {
    if (in_m >= n - 1) {
      done = body_got;
      return;
    }
    size_t ready = complete ? body_got : body_got / kReduceChunk * kReduceChunk;
    if (ready <= done) return;
    uint8_t* at = base + seg_begin(in_seg(in_m)) + done;
    reduce_into(at, incoming + done, (ready - done) / esize, dtype, op);
    if (in_m == n - 2) apply_average(at, (ready - done) / esize, dtype, divisor);
    done = ready;
  };

  while (in_m < msgs || out_m < msgs) {
    bool progress = false, sendable = false;
    if (out_m < msgs) {
      size_t body = seg_len(out_seg(out_m)), pad = wire_pad(body), ready = out_ready();
      // What may leave now: the ready body (the padding once all of it is), in whole pieces.
      Outgoing out{base + seg_begin(out_seg(out_m)), ready, ready == body ? pad : 0};
      if (out_sent < out.len + out.pad && (ready == body || ready - out_sent >= kStreamPiece)) {
        sendable = true;
        size_t moved = step_send(next_.get(), out, out_sent, next_name);
        out_sent += moved;
        progress |= moved > 0;
      }
      if (out_sent == body + pad) {
        ++out_m;
        out_sent = 0;
        progress = true;
        sendable = false;
      }
    }
    if (in_m < msgs) {
      Incoming in;
      if (in_m == 0 && prefix0 > 0) {
        in.prefix = &theirs_;
        in.prefix_len = prefix0;
      }
      in.body = in_m < n - 1 ? incoming : base + seg_begin(in_seg(in_m));
      in.body_len = seg_len(in_seg(in_m));
      in.pad = wire_pad(in.body_len);
      size_t total = in.prefix_len + in.body_len + in.pad;
      size_t moved = in_got < total ? step_recv(prev_.get(), in, in_got, sink, prev_name) : 0;
      bool prefix_done = in_got < in.prefix_len && in_got + moved >= in.prefix_len;
      in_got += moved;
      progress |= moved > 0;
      if (prefix_done) check_header(theirs_.op);  // throws before any of the data is used
      size_t body_got = std::min(in_got > in.prefix_len ? in_got - in.prefix_len : 0, in.body_len);
      if (moved > 0) absorb(body_got, body_got == in.body_len);
      if (in_got == total) {
        ++in_m;
        in_got = 0;
        done = 0;
        progress = true;
      }
    }
    if (progress) continue;
    pollfd p[2] = {{next_.get(), static_cast<short>(sendable ? POLLOUT : 0), 0},
                   {prev_.get(), static_cast<short>(in_m < msgs ? POLLIN : 0), 0}};
    if (poll_spin(p, 2, waiting()) == 0) throw ring_stalled(in_m < msgs, prev_name, next_name);
  }
}

// At least `bytes` of scratch, starting on a kWireAlign boundary (socket.h).
uint8_t* TcpRing::scratch(size_t bytes) {
  if (scratch_.size() < bytes + kWireAlign) scratch_.resize(bytes + kWireAlign);
  auto at = reinterpret_cast<uintptr_t>(scratch_.data());
  return scratch_.data() + (kWireAlign - at % kWireAlign) % kWireAlign;
}

}  // namespace libtrain::detail
