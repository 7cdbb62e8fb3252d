// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Stores: InMemoryStore with threads, TcpStore across forked processes (set/get/add, waits,
// timeouts, barrier), PrefixStore namespacing, TcpStore against peers that send garbage lengths
// (found by tests/fuzz/fuzz_libtrain_wire), TcpStore giving its port back (seal, then destroy),
// and the world's WorldStore (src/world_store.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "ranks.h"
#include "world_store.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;

START_TEST(in_memory_set_get_add) {
  InMemoryStore s;
  s.set("a", to_bytes("1"));
  ck_assert_str_eq(to_string(s.get("a", Seconds(1))).c_str(), "1");
  ck_assert_int_eq(s.add("n", 5), 5);
  ck_assert_int_eq(s.add("n", -2), 3);
}
END_TEST

START_TEST(in_memory_get_waits_then_times_out) {
  InMemoryStore s;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s.set("late", to_bytes("x"));
  });
  ck_assert_str_eq(to_string(s.get("late", Seconds(5))).c_str(), "x");
  t.join();
  auto start = std::chrono::steady_clock::now();
  bool timed_out = false;
  try {
    s.get("never", Seconds(0.2));
  } catch (const TimeoutError&) {
    timed_out = true;
  }
  ck_assert(timed_out);
  ck_assert(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
}
END_TEST

START_TEST(prefix_store_namespaces_keys) {
  auto base = std::make_shared<InMemoryStore>();
  PrefixStore a(base, "a"), b(base, "b");
  a.set("k", to_bytes("1"));
  b.set("k", to_bytes("2"));
  ck_assert_str_eq(to_string(base->get("a/k", Seconds(1))).c_str(), "1");
  ck_assert_str_eq(to_string(b.get("k", Seconds(1))).c_str(), "2");
}
END_TEST

START_TEST(tcp_store_across_processes) {
  auto codes = testing::run_processes(4, [](int rank, const std::shared_ptr<Store>& store) {
    store->set("hello/" + std::to_string(rank), to_bytes("from " + std::to_string(rank)));
    for (int r = 0; r < 4; ++r)
      if (to_string(store->get("hello/" + std::to_string(r), Seconds(10))) != "from " + std::to_string(r)) return 1;
    for (int i = 0; i < 10; ++i) store->add("counter", 1);
    store->barrier("b1", 4, Seconds(10));
    return store->add("counter", 0) == 40 ? 0 : 2;
  });
  for (int c : codes) ck_assert_int_eq(c, 0);
}
END_TEST

START_TEST(tcp_store_large_value_and_timeout) {
  auto codes = testing::run_processes(2, [](int rank, const std::shared_ptr<Store>& store) {
    Bytes big(3 << 20);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
    if (rank == 0) store->set("big", big);
    if (store->get("big", Seconds(10)) != big) return 1;
    try {
      store->get("missing", Seconds(0.3));
    } catch (const TimeoutError&) {
      return 0;
    }
    return 2;
  });
  for (int c : codes) ck_assert_int_eq(c, 0);
}
END_TEST

START_TEST(tcp_store_connect_timeout) {
  auto start = std::chrono::steady_clock::now();
  bool timed_out = false;
  try {
    TcpStore s("127.0.0.1", 1, false, Seconds(0.3));  // nothing listens on port 1
  } catch (const TimeoutError&) {
    timed_out = true;
  }
  ck_assert(timed_out);
  ck_assert(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
}
END_TEST

namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A raw TCP connection to 127.0.0.1:PORT (the hostile peer's side).
int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  ck_assert_int_eq(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

}  // namespace

// A request claiming a 4 GiB key made the server allocate (and zero) 4 GiB, then wait 30 s for
// it while every honest client stalled; now it hangs up at once and keeps serving. An add past
// INT64_MAX wraps around.
START_TEST(tcp_store_server_refuses_huge_lengths) {
  TcpStore store("127.0.0.1", 0, true, Seconds(5));
  for (uint32_t bad_at : {1u, 2u}) {  // the key's length, then the payload's
    int fd = raw_connect(store.port());
    uint8_t msg[10] = {1, 1, 0, 0, 0, 'k', 0xff, 0xff, 0xff, 0xff};  // set "k", payload 4 GiB - 1
    size_t len = bad_at == 1 ? 5 : 10;
    if (bad_at == 1) std::memset(msg + 1, 0xff, 4);  // key 4 GiB - 1
    ck_assert_int_eq(write(fd, msg, len), static_cast<ssize_t>(len));
    auto start = std::chrono::steady_clock::now();
    char c;
    ck_assert_int_eq(read(fd, &c, 1), 0);  // closed, without an answer
    ck_assert(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    close(fd);
  }
  // Sums wrap around instead of overflowing (undefined behaviour, found by the fuzzer's UBSan).
  ck_assert(store.add("big", INT64_MAX) == INT64_MAX);
  ck_assert(store.add("big", 1) == INT64_MIN);
  store.set("still", to_bytes("served"));
  ck_assert_str_eq(to_string(store.get("still", Seconds(1))).c_str(), "served");
}
END_TEST

// A "server" answering with a 4 GiB value made the client allocate it, one answering an add
// with no value made it memcpy from a null pointer; both are now PeerErrors.
START_TEST(tcp_store_client_refuses_huge_value) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(a);
  ck_assert_int_eq(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ck_assert_int_eq(listen(listener, 1), 0);
  ck_assert_int_eq(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  TcpStore client("127.0.0.1", ntohs(a.sin_port), false, Seconds(5));
  int server = accept(listener, nullptr, nullptr);
  const uint8_t answer[5] = {1, 0xff, 0xff, 0xff, 0xff};  // found, 4 GiB - 1 bytes follow
  ck_assert_int_eq(write(server, answer, sizeof(answer)), 5);
  bool refused = false;
  try {
    client.get("k", Seconds(1));
  } catch (const PeerError& e) {
    refused = std::strstr(e.what(), "4294967295-byte value") != nullptr;
  }
  ck_assert(refused);
  // An add answered with "not found" (or any size but 8) is a PeerError, not a sum of 0 copied
  // from a null pointer.
  const uint8_t not_found[5] = {0, 0, 0, 0, 0};
  ck_assert_int_eq(write(server, not_found, sizeof(not_found)), 5);
  bool bad_add = false;
  try {
    client.add("n", 1);
  } catch (const PeerError& e) {
    bad_add = std::strstr(e.what(), "with 0 bytes instead of 8") != nullptr;
  }
  ck_assert(bad_add);
  bool too_long = false;
  try {
    client.set(std::string(100 << 10, 'k'), {});
  } catch (const InvalidArgument&) {
    too_long = true;
  }
  ck_assert(too_long);
  close(server);
  close(listener);
}
END_TEST

namespace {

// Binds and listens on 127.0.0.1:PORT *without* SO_REUSEADDR, as torch.distributed's TCPStore
// (PyTorch 1.13) does: fails while any socket, a TIME_WAIT one included, holds the port.
bool port_is_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && listen(fd, 1) == 0;
  close(fd);
  return ok;
}

}  // namespace

// libtrain.init() with the env bootstrap, then torch.distributed's env:// rendezvous on the same
// MASTER_PORT: after seal() nobody new is accepted (a newcomer is refused, not accepted and
// reset) while the connected clients are still served; destroying the server store waits for
// the clients to hang up, so that no TIME_WAIT socket is left on the port.
START_TEST(tcp_store_seal_then_destroy_frees_the_port) {
  auto server = std::make_unique<TcpStore>("127.0.0.1", 0, true, Seconds(5));
  int port = server->port();
  auto client = std::make_unique<TcpStore>("127.0.0.1", port, false, Seconds(5));
  client->set("k", to_bytes("v"));
  ck_assert(!port_is_free(port));
  server->seal();
  // seal() returned: the listener is gone, so a connection attempt is refused at once.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  bool refused = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno == ECONNREFUSED;
  close(fd);
  ck_assert_msg(refused, "a new connection after seal() was not refused");
  ck_assert_str_eq(to_string(client->get("k", Seconds(1))).c_str(), "v");  // still served
  ck_assert_str_eq(to_string(server->get("k", Seconds(1))).c_str(), "v");
  ck_assert_int_eq(client->add("n", 2), 2);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    client.reset();
  });
  auto start = std::chrono::steady_clock::now();
  server.reset();  // waits for the client to hang up first
  auto took = std::chrono::steady_clock::now() - start;
  late.join();
  ck_assert_msg(took >= std::chrono::milliseconds(250), "the server did not wait for its client");
  ck_assert_msg(took < std::chrono::seconds(2), "the server waited past the client's hang-up");
  ck_assert_msg(port_is_free(port), "port %d still held after the store went", port);
}
END_TEST

// A client that never hangs up holds the server's destruction for 2 s at most.
START_TEST(tcp_store_destroy_waits_bounded) {
  auto server = std::make_unique<TcpStore>("127.0.0.1", 0, true, Seconds(5));
  TcpStore client("127.0.0.1", server->port(), false, Seconds(5));
  client.set("k", to_bytes("v"));
  auto start = std::chrono::steady_clock::now();
  server.reset();
  auto took = std::chrono::steady_clock::now() - start;
  ck_assert(took >= std::chrono::milliseconds(1500) && took < std::chrono::seconds(4));
}
END_TEST

// WorldStore: after publish(), every rank's values reach every rank through the communicator
// (NcclCommunicator's "nccl/gpu/<rank>" records), large and empty ones included; where ranks set
// one key, the lowest rank's value counts.
START_TEST(world_store_publishes_every_rank_s_values) {
  std::string err = testing::run_threads(3, [](int rank, const std::shared_ptr<Store>& store) {
    Communicator comm(store, rank, 3, rank == 2 ? "b" : "a");
    detail::WorldStore world(comm);
    Bytes big(3 << 20);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + 1);
    if (rank == 0) {
      world.set("id", to_bytes("nccl-id-0123"));
      world.set("big", big);
    } else {
      world.set("id", to_bytes("ignored"));  // rank 0's value counts
    }
    world.set("gpu/" + std::to_string(rank), to_bytes("bus-" + std::to_string(rank * 11)));
    if (rank == 2) world.set("empty", Bytes{});
    world.publish(Seconds(5));
    if (to_string(world.get("id", Seconds(5))) != "nccl-id-0123") throw std::runtime_error("id differs");
    if (world.get("big", Seconds(5)) != big) throw std::runtime_error("big value differs");
    for (int r = 0; r < 3; ++r)
      if (to_string(world.get("gpu/" + std::to_string(r), Seconds(5))) != "bus-" + std::to_string(r * 11))
        throw std::runtime_error("rank " + std::to_string(r) + "'s value did not arrive");
    if (!world.get("empty", Seconds(5)).empty()) throw std::runtime_error("empty value not empty");
    if (!world.get("never-set", Seconds(5)).empty()) throw std::runtime_error("unset key not empty");
    bool no_add = false;
    try {
      world.add("n", 1);
    } catch (const Error&) {
      no_add = true;
    }
    if (!no_add) throw std::runtime_error("add() did not throw");
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_store");
  TCase* tc = tcase_create("store");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, in_memory_set_get_add);
  tcase_add_test(tc, in_memory_get_waits_then_times_out);
  tcase_add_test(tc, prefix_store_namespaces_keys);
  tcase_add_test(tc, tcp_store_across_processes);
  tcase_add_test(tc, tcp_store_large_value_and_timeout);
  tcase_add_test(tc, tcp_store_connect_timeout);
  tcase_add_test(tc, tcp_store_server_refuses_huge_lengths);
  tcase_add_test(tc, tcp_store_client_refuses_huge_value);
  tcase_add_test(tc, tcp_store_seal_then_destroy_frees_the_port);
  tcase_add_test(tc, tcp_store_destroy_waits_bounded);
  tcase_add_test(tc, world_store_publishes_every_rank_s_values);
  suite_add_tcase(s, tc);
  return s;
}
