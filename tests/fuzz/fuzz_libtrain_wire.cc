// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: libtrain's bytes from peers. The first 64 bytes are a TCP ring op header
// (tcp_ring.h WireHeader) described as check_header() does when ranks disagree; byte 64 picks a
// side of the TcpStore protocol (tcp_store.cc) and the rest is what a hostile peer sends there:
// requests to a real store server, or replies to a real store client, over loopback TCP.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "libtrain/errors.h"
#include "libtrain/tcp_store.h"
#include "op_header.h"
#include "socket.h"
#include "tcp_ring.h"

namespace lt = libtrain;
namespace ld = libtrain::detail;

namespace {

constexpr lt::Seconds kTimeout{5};
constexpr std::chrono::seconds kIoTimeout{5};

// libtrain's sockets are non-blocking; the hostile side here waits like a simple peer would.
void make_blocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) std::abort();
}

void send_then_close_write(int fd, const uint8_t* data, size_t size) {
  make_blocking(fd);
  size_t off = 0;
  while (off < size) {
    ssize_t n = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the other side closed: it refused what it got so far
    off += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
}

void drain(int fd) {
  char buf[4096];
  while (::recv(fd, buf, sizeof(buf), 0) > 0) {
  }
}

// STREAM as a client's requests to a fresh store server; the server must answer or hang up.
void hostile_client(const uint8_t* stream, size_t size) {
  lt::TcpStore store("127.0.0.1", 0, true, kTimeout);
  ld::Fd peer = ld::connect_tcp("127.0.0.1", store.port(), ld::Clock::now() + kIoTimeout);
  send_then_close_write(peer.get(), stream, size);
  drain(peer.get());  // the server closes once the stream ends, mid-message or not
  store.set("after", lt::Bytes{1, 2, 3});  // and still serves its honest clients
  if (store.get("after", kTimeout) != lt::Bytes{1, 2, 3}) __builtin_trap();
}

// STREAM as a store server's replies to a client's set, get and add.
void hostile_server(const uint8_t* stream, size_t size) {
  int port = 0;
  ld::Fd listener = ld::listen_tcp(port);
  lt::TcpStore store("127.0.0.1", port, false, kTimeout);
  ld::Fd server = ld::accept_tcp(listener.get(), ld::Clock::now() + kIoTimeout);
  send_then_close_write(server.get(), stream, size);  // fits the socket buffer: inputs are small
  try {
    store.set("key", lt::Bytes{7});
    (void)store.get("key", lt::Seconds{0});
    (void)store.add("counter", 1);
  } catch (const lt::Error&) {  // what a client may do with garbage: throw libtrain's errors
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ld::WireHeader header{};
  std::memcpy(&header, data, std::min(size, sizeof(header)));
  (void)ld::describe(header.op);
  if (size <= sizeof(header) + 1) return 0;
  const uint8_t* stream = data + sizeof(header) + 1;
  size_t stream_size = size - sizeof(header) - 1;
  if (stream_size > 64 * 1024) return 0;  // more than the loopback buffers hold unread
  if (data[sizeof(header)] & 1) hostile_server(stream, stream_size);
  else hostile_client(stream, stream_size);
  return 0;
}
