// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The TCP ring's wire format (libtrain/src/socket.h, tcp_ring.h): every message is padded to a
// multiple of kWireAlign bytes and consumed with its padding, the op header is kWireAlign bytes,
// and the reduce-scatter's segments start on kWireAlign-byte boundaries. Together they keep the
// kernel's copies between user buffers and socket memory at one alignment (see socket.h for the
// 16x slowdown this avoids). Also: LIBTRAIN_RING_SPIN_US parsing, a wait that spins still
// times out, and a peer's op header with out-of-range fields is described, not read past.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "libtrain/communicator.h"
#include "libtrain/errors.h"
#include "socket.h"
#include "tcp_ring.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;
using namespace libtrain::detail;

namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    close(a);
    close(b);
  }
};

Waiting soon() { return {Clock::now() + std::chrono::seconds(5)}; }

// Everything readable on `fd` within a short while.
std::vector<unsigned char> drain(int fd) {
  std::vector<unsigned char> out;
  unsigned char buf[4096];
  for (int idle = 0; idle < 20;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.insert(out.end(), buf, buf + n);
      idle = 0;
    } else {
      ++idle;
      usleep(1000);
    }
  }
  return out;
}

}  // namespace

START_TEST(messages_are_padded_to_the_wire_alignment) {
  ck_assert_uint_eq(kWireAlign, 64);
  ck_assert_uint_eq(sizeof(WireHeader), kWireAlign);
  for (size_t len : {size_t{1}, size_t{63}, size_t{64}, size_t{100}, size_t{4097}}) {
    Pair p;
    std::vector<unsigned char> data(len);
    for (size_t i = 0; i < len; ++i) data[i] = static_cast<unsigned char>(1 + i % 251);
    Incoming none;
    exchange(p.a, Outgoing{data.data(), len, wire_pad(len)}, p.a, none, soon(), "peer", "peer");
    auto wire = drain(p.b);
    ck_assert_uint_eq(wire.size() % kWireAlign, 0);
    ck_assert_uint_eq(wire.size(), (len + kWireAlign - 1) / kWireAlign * kWireAlign);
    ck_assert(std::memcmp(wire.data(), data.data(), len) == 0);
    for (size_t i = len; i < wire.size(); ++i) ck_assert_int_eq(wire[i], 0);
  }
}
END_TEST

// The receiver drops the padding, so the next message starts where the sender's does.
START_TEST(padding_is_consumed_before_the_next_message) {
  Pair p;
  std::vector<unsigned char> first(100, 7), second(30, 9), wire;
  WireHeader header{};
  header.op.seq = 42;
  header.op.count = 25;
  wire.insert(wire.end(), reinterpret_cast<unsigned char*>(&header),
              reinterpret_cast<unsigned char*>(&header) + sizeof header);
  wire.insert(wire.end(), first.begin(), first.end());
  wire.insert(wire.end(), wire_pad(first.size()), 0xee);  // padding is never looked at
  wire.insert(wire.end(), second.begin(), second.end());
  wire.insert(wire.end(), wire_pad(second.size()), 0xee);
  ck_assert_int_eq(write(p.b, wire.data(), wire.size()), static_cast<ssize_t>(wire.size()));

  WireHeader got{};
  bool header_checked = false;
  std::vector<unsigned char> a(first.size()), b(second.size());
  Incoming in;
  in.prefix = &got;
  in.prefix_len = sizeof got;
  in.on_prefix = [&] { header_checked = true; };
  in.body = a.data();
  in.body_len = a.size();
  in.pad = wire_pad(a.size());
  size_t last_seen = 0;
  in.on_body = [&](size_t n) {
    ck_assert_uint_le(n, a.size());  // padding is not reported as body
    last_seen = n;
  };
  exchange(p.a, Outgoing{}, p.a, in, soon(), "peer", "peer");
  ck_assert(header_checked);
  ck_assert_uint_eq(got.op.seq, 42);
  ck_assert_uint_eq(last_seen, a.size());
  ck_assert(a == first);
  Incoming next;
  next.body = b.data();
  next.body_len = b.size();
  next.pad = wire_pad(b.size());
  exchange(p.a, Outgoing{}, p.a, next, soon(), "peer", "peer");
  ck_assert(b == second);
  ck_assert_uint_eq(drain(p.a).size(), 0);
}
END_TEST

START_TEST(segments_start_on_the_wire_alignment) {
  for (size_t esize : {size_t{2}, size_t{4}, size_t{8}})
    for (size_t n = 2; n <= 9; ++n)
      for (size_t count : {size_t{0}, size_t{1}, n - 1, n + 1, size_t{1000}, size_t{262147}, size_t{1} << 20}) {
        ck_assert_uint_eq(ring_segment_begin(count, n, 0, esize), 0);
        ck_assert_uint_eq(ring_segment_begin(count, n, n, esize), count);
        size_t grain = kWireAlign / esize;
        for (size_t m = 0; m < n; ++m) {
          size_t begin = ring_segment_begin(count, n, m, esize), end = ring_segment_begin(count, n, m + 1, esize);
          ck_assert_uint_eq(begin * esize % kWireAlign, 0);
          ck_assert_uint_le(begin, end);
          // Balanced: within one grain of an even split.
          ck_assert_uint_le(end - begin, count / n + 2 * grain);
        }
      }
}
END_TEST

START_TEST(spin_option_is_parsed_and_checked) {
  unsetenv("LIBTRAIN_RING_SPIN_US");
  ck_assert_int_eq(CommunicatorOptions::from_env().ring_spin_us, 2000);
  setenv("LIBTRAIN_RING_SPIN_US", "0", 1);
  ck_assert_int_eq(CommunicatorOptions::from_env().ring_spin_us, 0);
  setenv("LIBTRAIN_RING_SPIN_US", "350", 1);
  ck_assert_int_eq(CommunicatorOptions::from_env().ring_spin_us, 350);
  for (const char* bad : {"-1", "abc", "10ms"}) {
    setenv("LIBTRAIN_RING_SPIN_US", bad, 1);
    bool rejected = false;
    try {
      CommunicatorOptions::from_env();
    } catch (const InvalidArgument& e) {
      rejected = std::strstr(e.what(), "LIBTRAIN_RING_SPIN_US") != nullptr;
    }
    ck_assert_msg(rejected, "LIBTRAIN_RING_SPIN_US=%s accepted", bad);
  }
  unsetenv("LIBTRAIN_RING_SPIN_US");
}
END_TEST

// A spinning wait still ends at the deadline with the timeout error, whichever is shorter.
START_TEST(spinning_wait_times_out) {
  Pair p;
  unsigned char byte = 0;
  auto start = Clock::now();
  bool timed_out = false;
  try {
    recv_all(p.a, &byte, 1, Waiting(Clock::now() + std::chrono::milliseconds(200), std::chrono::microseconds(50000)),
             "peer");
  } catch (const TimeoutError&) {
    timed_out = true;
  }
  ck_assert(timed_out);
  auto took = Clock::now() - start;
  ck_assert(took >= std::chrono::milliseconds(150) && took < std::chrono::seconds(3));
}
END_TEST

// check_header() describes the previous rank's header, which is whatever bytes arrived: a dtype
// or op past the enums read past the name tables (found by tests/fuzz/fuzz_libtrain_wire).
START_TEST(garbage_op_header_is_described) {
  OpHeader h{};
  h.kind = 200;
  h.dtype = 7;
  h.op = 255;
  std::string text = describe(h);
  ck_assert_msg(text.find("dtype=unknown, op=unknown") != std::string::npos, "%s", text.c_str());
  ck_assert_str_eq(dtype_name(DataType::kUint8), "uint8");
  ck_assert_str_eq(op_name(ReduceOp::kBitOr), "bitor");
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_wire");
  TCase* tc = tcase_create("wire");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, messages_are_padded_to_the_wire_alignment);
  tcase_add_test(tc, padding_is_consumed_before_the_next_message);
  tcase_add_test(tc, segments_start_on_the_wire_alignment);
  tcase_add_test(tc, spin_option_is_parsed_and_checked);
  tcase_add_test(tc, spinning_wait_times_out);
  tcase_add_test(tc, garbage_op_header_is_described);
  suite_add_tcase(s, tc);
  return s;
}
