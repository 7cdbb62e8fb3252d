// TCP plumbing shared by TcpStore and the TCP ring: a move-only fd owner, listen/connect with
// deadlines, and full-duplex transfers that never block past the deadline (poll-driven).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

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

// Blocking-with-deadline helpers on non-blocking sockets. `peer` names the other side in errors.
void send_all(int fd, const void* buf, size_t len, Clock::time_point deadline, const std::string& peer);
void recv_all(int fd, void* buf, size_t len, Clock::time_point deadline, const std::string& peer);

// What one exchange() receives: an optional prefix (the ring's op header), checked by `on_prefix`
// as soon as it is in, then `body_len` bytes into `body`, `on_body(bytes_so_far)` running as they
// arrive (the ring reduces finished chunks while the rest is in flight).
struct Incoming {
  void* prefix = nullptr;
  size_t prefix_len = 0;
  std::function<void()> on_prefix;
  void* body = nullptr;
  size_t body_len = 0;
  std::function<void(size_t)> on_body;
};

// Sends `send_len` bytes to `send_fd` while receiving `in` from `recv_fd`, so that a ring of ranks
// all sending at once cannot deadlock.
void exchange(int send_fd, const void* send_buf, size_t send_len, int recv_fd, Incoming& in,
              Clock::time_point deadline, const std::string& send_peer, const std::string& recv_peer);

// Non-loopback IPv4 addresses of this host, then 127.0.0.1.
std::vector<std::string> local_addresses();

}  // namespace libtrain::detail
