// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// TCP helpers: every wait is a poll() bounded by the caller's deadline, every failure a typed
// exception naming the peer (errors.md). Sockets are non-blocking with TCP_NODELAY.
#include "socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "libtrain/errors.h"

namespace libtrain::detail {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) { reset(); fd_ = o.release(); }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

void set_nodelay_nonblock(int fd) {
  int one = 1;
  LIBTRAIN_SYS(::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), "setsockopt TCP_NODELAY");
  int flags = ::fcntl(fd, F_GETFL);
  LIBTRAIN_SYS(flags, "fcntl F_GETFL");
  LIBTRAIN_SYS(::fcntl(fd, F_SETFL, flags | O_NONBLOCK), "fcntl O_NONBLOCK");
}

Fd listen_tcp(int& port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  LIBTRAIN_SYS(fd.get(), "socket");
  int one = 1;
  LIBTRAIN_SYS(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), "SO_REUSEADDR");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  LIBTRAIN_SYS(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
               "bind TCP port " + std::to_string(port));
  LIBTRAIN_SYS(::listen(fd.get(), 128), "listen");
  socklen_t len = sizeof(addr);
  LIBTRAIN_SYS(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len), "getsockname");
  port = ntohs(addr.sin_port);
  return fd;
}

static bool resolve(const std::string& host, int port, sockaddr_in& out) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
    return false;
  std::memcpy(&out, res->ai_addr, sizeof(out));
  ::freeaddrinfo(res);
  return true;
}

Fd try_connect_tcp(const std::string& host, int port, int attempt_ms) {
  sockaddr_in addr{};
  if (!resolve(host, port, addr)) return Fd();
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  LIBTRAIN_SYS(fd.get(), "socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  if (errno != EINPROGRESS) return Fd();
  pollfd p{fd.get(), POLLOUT, 0};
  if (::poll(&p, 1, attempt_ms) != 1) return Fd();
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return Fd();
  return fd;
}

Fd connect_tcp(const std::string& host, int port, Clock::time_point deadline) {
  for (int delay_ms = 1;; delay_ms = std::min(delay_ms * 2, 100)) {
    Fd fd = try_connect_tcp(host, port, std::max(1, std::min(ms_left(deadline), 1000)));
    if (fd.valid()) {
      set_nodelay_nonblock(fd.get());
      return fd;
    }
    if (Clock::now() >= deadline)
      throw TimeoutError("libtrain: cannot connect to " + host + ":" + std::to_string(port) +
                         " before the timeout (LIBTRAIN_TIMEOUT); is the peer running and the "
                         "address reachable?");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
}

Fd accept_tcp(int listen_fd, Clock::time_point deadline) {
  pollfd p{listen_fd, POLLIN, 0};
  int rc = ::poll(&p, 1, ms_left(deadline));
  LIBTRAIN_SYS(rc, "poll on listening socket");
  if (rc == 0) throw TimeoutError("libtrain: no peer connected before the timeout (LIBTRAIN_TIMEOUT)");
  Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  LIBTRAIN_SYS(fd.get(), "accept");
  set_nodelay_nonblock(fd.get());
  return fd;
}

int poll_spin(pollfd* fds, int n, const Waiting& wait) {
  auto checked = [](int rc) {
    if (rc < 0 && errno != EINTR) LIBTRAIN_SYS(rc, "poll");
    return rc;
  };
  if (wait.spin.count() > 0) {
    auto until = Clock::now() + wait.spin;
    do {
      if (checked(::poll(fds, static_cast<nfds_t>(n), 0)) > 0) return 1;
      sched_yield();  // where CPUs are shared (sandbox nodes, oversubscribed hosts) the peer runs
    } while (Clock::now() < until);
  }
  return checked(::poll(fds, static_cast<nfds_t>(n), ms_left(wait.deadline)));
}

static void wait_fd(int fd, short events, const Waiting& wait, const std::string& peer) {
  pollfd p{fd, events, 0};
  if (poll_spin(&p, 1, wait) == 0)
    throw TimeoutError("libtrain: " + peer + " sent nothing within the timeout (LIBTRAIN_TIMEOUT)");
}

[[noreturn]] static void throw_peer_lost(const std::string& peer, int err) {
  throw PeerError("libtrain: connection to " + peer + " lost" +
                  (err ? std::string(" (") + std::strerror(err) + ")" : std::string()) +
                  "; the peer died or aborted the collective after its own error");
}

void send_all(int fd, const void* buf, size_t len, const Waiting& wait, const std::string& peer) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) { p += n; len -= static_cast<size_t>(n); continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) throw_peer_lost(peer, errno);
    wait_fd(fd, POLLOUT, wait, peer);
  }
}

void recv_all(int fd, void* buf, size_t len, const Waiting& wait, const std::string& peer) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) { p += n; len -= static_cast<size_t>(n); continue; }
    if (n == 0) throw_peer_lost(peer, 0);
    if (errno == EINTR) continue;
    if (errno != EAGAIN) throw_peer_lost(peer, errno);
    wait_fd(fd, POLLIN, wait, peer);
  }
}

const char kZeros[kWireAlign] = {};

size_t send_some(int fd, const iovec* v, int parts, const std::string& peer) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(v);
  m.msg_iovlen = static_cast<size_t>(parts);
  ssize_t n = ::sendmsg(fd, &m, MSG_NOSIGNAL);
  if (n >= 0) return static_cast<size_t>(n);
  if (errno == EAGAIN || errno == EINTR) return 0;
  throw_peer_lost(peer, errno);
}

size_t recv_some(int fd, const iovec* v, int parts, const std::string& peer) {
  ssize_t n = ::readv(fd, v, parts);
  if (n > 0) return static_cast<size_t>(n);
  if (n == 0) throw_peer_lost(peer, 0);
  if (errno == EAGAIN || errno == EINTR) return 0;
  throw_peer_lost(peer, errno);
}

size_t step_send(int fd, const Outgoing& out, size_t sent, const std::string& peer) {
  iovec v[2];
  int parts = 0;
  size_t body_left = sent < out.len ? out.len - sent : 0;
  constexpr size_t kMaxCall = 1 << 20;
  if (body_left > 0)
    v[parts++] = {const_cast<char*>(static_cast<const char*>(out.data)) + sent, std::min(body_left, kMaxCall)};
  if (body_left <= kMaxCall && out.pad > 0) {
    size_t pad_sent = sent > out.len ? sent - out.len : 0;
    v[parts++] = {const_cast<char*>(kZeros) + pad_sent, out.pad - pad_sent};
  }
  return send_some(fd, v, parts, peer);
}

size_t step_recv(int fd, Incoming& in, size_t got, char* sink, const std::string& peer) {
  iovec v[3];
  int parts = 0;
  auto* prefix = static_cast<char*>(in.prefix);
  auto* body = static_cast<char*>(in.body);
  if (got < in.prefix_len) v[parts++] = {prefix + got, in.prefix_len - got};
  size_t body_got = got > in.prefix_len ? got - in.prefix_len : 0;
  if (body_got < in.body_len) v[parts++] = {body + body_got, in.body_len - body_got};
  size_t pad_got = body_got > in.body_len ? body_got - in.body_len : 0;
  if (pad_got < in.pad) v[parts++] = {sink, in.pad - pad_got};
  return recv_some(fd, v, parts, peer);
}

void exchange(int send_fd, const Outgoing& out, int recv_fd, Incoming& in, const Waiting& wait,
              const std::string& send_peer, const std::string& recv_peer) {
  char sink[kWireAlign];  // where the padding received goes
  size_t sent = 0, got = 0, send_len = out.len + out.pad, recv_len = in.prefix_len + in.body_len + in.pad;
  while (sent < send_len || got < recv_len) {
    bool progress = false;
    if (sent < send_len) {
      size_t n = step_send(send_fd, out, sent, send_peer);
      sent += n;
      progress |= n > 0;
    }
    if (got < recv_len) {
      size_t n = step_recv(recv_fd, in, got, sink, recv_peer);
      bool prefix_done = got < in.prefix_len && got + n >= in.prefix_len;
      bool body_was_done = got >= in.prefix_len + in.body_len;
      got += n;
      if (prefix_done && in.on_prefix) in.on_prefix();
      if (got > in.prefix_len && n > 0 && !body_was_done && in.on_body)
        in.on_body(std::min(got - in.prefix_len, in.body_len));
      progress |= n > 0;
    }
    if (progress) continue;
    pollfd p[2] = {{send_fd, static_cast<short>(sent < send_len ? POLLOUT : 0), 0},
                   {recv_fd, static_cast<short>(got < recv_len ? POLLIN : 0), 0}};
    if (poll_spin(p, 2, wait) == 0) throw ring_stalled(got < recv_len, recv_peer, send_peer);
  }
}

TimeoutError ring_stalled(bool receiving, const std::string& recv_peer, const std::string& send_peer) {
  if (receiving)
    return TimeoutError("libtrain: " + recv_peer + " sent nothing within LIBTRAIN_TIMEOUT during a ring "
                        "transfer: it, or a rank of its node, hung or was stopped");
  return TimeoutError("libtrain: " + send_peer + " took nothing within LIBTRAIN_TIMEOUT during a ring "
                      "transfer: it hung or was stopped");
}

std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      char buf[INET_ADDRSTRLEN];
      auto* sin = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
      if (!::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf))) continue;
      if (std::string(buf).rfind("127.", 0) != 0) out.emplace_back(buf);
    }
    ::freeifaddrs(list);
  }
  out.emplace_back("127.0.0.1");
  return out;
}

}  // namespace libtrain::detail
