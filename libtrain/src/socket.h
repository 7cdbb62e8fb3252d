// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// TCP plumbing shared by TcpStore and the TCP ring: a move-only fd owner, listen/connect with
// deadlines, and full-duplex transfers that never block past the deadline (poll-driven).
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "libtrain/errors.h"

namespace libtrain::detail {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset();

 private:
  int fd_ = -1;
};

// Milliseconds left before `deadline`, for poll(); 0 when past.
int ms_left(Clock::time_point deadline);

// Listening socket on all interfaces; port 0 picks one. Returns the bound port through `port`.
Fd listen_tcp(int& port);
// Connects with retries until `deadline` (the server may not be up yet). Throws TimeoutError.
Fd connect_tcp(const std::string& host, int port, Clock::time_point deadline);
// One connection attempt of at most `attempt` ms; invalid Fd on failure.
Fd try_connect_tcp(const std::string& host, int port, int attempt_ms);
Fd accept_tcp(int listen_fd, Clock::time_point deadline);
void set_nodelay_nonblock(int fd);

// How a transfer waits for its socket: first polling without sleeping for up to `spin` (a rank
// blocked in a collective has nothing else to do, and a sleeping thread is woken late: on
// virtual machines its idle CPU halts), yielding the CPU between polls to whatever shares it,
// then sleeping in poll(2) until `deadline`.
struct Waiting {
  Waiting(Clock::time_point d, std::chrono::microseconds s = {}) : deadline(d), spin(s) {}  // NOLINT: implicit from a deadline
  Clock::time_point deadline;
  std::chrono::microseconds spin;
};

// poll(2) as `wait` says: > 0 ready, 0 past the deadline, < 0 interrupted (look again).
int poll_spin(pollfd* fds, int n, const Waiting& wait);

// Blocking-with-deadline helpers on non-blocking sockets. `peer` names the other side in errors.
void send_all(int fd, const void* buf, size_t len, const Waiting& wait, const std::string& peer);
void recv_all(int fd, void* buf, size_t len, const Waiting& wait, const std::string& peer);

// The ring keeps every message a multiple of this many bytes on the wire (zeros pad the end), so
// the kernel copies each message to and from a page-fragment offset that is a multiple of it.
// Why: on x86 the kernel's copies are `rep movsb`, which on some CPUs (AMD EPYC here) runs 16
// times slower when the destination is 1-15 bytes ahead of the source modulo 4096, and up to 1.4
// times at other distances under 64 that are not multiples of 32 (bench/allreduce/copy_alias).
// The kernel appends each send to the sending thread's page fragment, so where a message lands
// there follows the stream (or restarts at 0 once the fragment is free again). A stream shifted by a 24-byte header put a 16-byte-aligned buffer
// (glibc's large allocations start 16 bytes into a page) 8 bytes behind every send's
// destination: 1 MiB across two nodes took twice as long (bench/allreduce/README.md).
constexpr size_t kWireAlign = 64;
inline size_t wire_pad(size_t len) { return (kWireAlign - len % kWireAlign) % kWireAlign; }

extern const char kZeros[kWireAlign];  // what padding sends

// One non-blocking sendmsg / readv of `parts` pieces: the bytes moved, 0 when it would block.
// Throw PeerError when the connection is gone (a peer that closed or reset it).
size_t send_some(int fd, const iovec* v, int parts, const std::string& peer);
size_t recv_some(int fd, const iovec* v, int parts, const std::string& peer);

// What one exchange() sends: `len` bytes of `data`, then `pad` zeros.
struct Outgoing {
  const void* data = nullptr;
  size_t len = 0;
  size_t pad = 0;
};

// What one exchange() receives: an optional prefix (the ring's op header), checked by `on_prefix`
// as soon as it is in, then `body_len` bytes into `body`, `on_body(bytes_so_far)` running as they
// arrive (the ring reduces finished chunks while the rest is in flight), then `pad` bytes that are
// dropped.
struct Incoming {
  void* prefix = nullptr;
  size_t prefix_len = 0;
  std::function<void()> on_prefix;
  void* body = nullptr;
  size_t body_len = 0;
  std::function<void(size_t)> on_body;
  size_t pad = 0;
};

// One non-blocking step of sending `out` whose first `sent` bytes (body, then padding) are gone:
// at most 1 MiB of body per call. Returns the bytes moved, 0 when it would block.
size_t step_send(int fd, const Outgoing& out, size_t sent, const std::string& peer);
// One readv of what is there of `in` past its first `got` bytes (prefix, body, padding; the
// padding goes to `sink`, kWireAlign bytes). Returns the bytes moved, 0 when it would block.
size_t step_recv(int fd, Incoming& in, size_t got, char* sink, const std::string& peer);

// Sends `out` to `send_fd` while receiving `in` from `recv_fd`, so that a ring of ranks all
// sending at once cannot deadlock.
void exchange(int send_fd, const Outgoing& out, int recv_fd, Incoming& in, const Waiting& wait,
              const std::string& send_peer, const std::string& recv_peer);

// The error of a ring transfer that stalled: the peer it waited to receive from (`receiving`),
// else the one it waited to send to, named as the rank that hung.
TimeoutError ring_stalled(bool receiving, const std::string& recv_peer, const std::string& send_peer);

// Non-loopback IPv4 addresses of this host, then 127.0.0.1.
std::vector<std::string> local_addresses();

}  // namespace libtrain::detail
