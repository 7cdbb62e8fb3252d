// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Failure policy (libtrain/docs/errors.md) with forked processes: a rank that dies, or ranks that
// disagree on a tensor's size, make every other rank throw a typed error within the timeout.
#include <signal.h>

#include <chrono>
#include <vector>

#include "ranks.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;

enum Exit { kOk = 0, kPeer = 10, kMismatch = 11, kTimeout = 12, kOther = 13 };

static int classify(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const MismatchError&) {
    return kMismatch;
  } catch (const PeerError&) {
    return kPeer;
  } catch (const TimeoutError&) {
    return kTimeout;
  } catch (const std::exception&) {
    return kOther;
  }
  return kOk;
}

static CommunicatorOptions short_timeout() {
  CommunicatorOptions o;
  o.timeout = Seconds(5);
  return o;
}

using testing::Messages;

// `nodes_of(rank)` names the node; rank `victim` is killed (or stopped, when `stop`) after the
// first allreduce. Every other rank fails within the timeout, and its message names the victim
// and its node (docs/errors.md, "Who failed"), whichever rank saw the failure first.
static void check_culprit(int n, int victim, std::string (*nodes_of)(int), bool stop = false) {
  Messages messages;
  auto start = std::chrono::steady_clock::now();
  auto codes = testing::run_processes(n, [&](int rank, const std::shared_ptr<Store>& store) {
    int code = kOk;
    try {
      Communicator comm(store, rank, n, nodes_of(rank), short_timeout());
      std::vector<float> buf(100000, 1.0f);
      comm.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      if (rank == victim) raise(stop ? SIGSTOP : SIGKILL);
      for (int i = 0; i < 1000; ++i) comm.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kMax);
    } catch (const PeerError& e) {
      messages.write(rank, e.what());
      code = kPeer;
    } catch (const TimeoutError& e) {
      messages.write(rank, e.what());
      code = kTimeout;
    } catch (const std::exception& e) {
      messages.write(rank, e.what());
      code = kOther;
    }
    return code;
  }, 30, stop ? victim : -1);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string culprit = "rank " + std::to_string(victim) + " on node " + nodes_of(victim) + " ";
  for (int r = 0; r < n; ++r) {
    int code = codes[static_cast<size_t>(r)];
    if (r == victim) {
      ck_assert_int_eq(code, 128 + SIGKILL);
      continue;
    }
    std::string text = messages.read(r);
    ck_assert_msg(code == kPeer || code == kTimeout,
                  "rank %d exited %d, want a PeerError or TimeoutError: %s", r, code, text.c_str());
    ck_assert_msg(text.find(culprit) != std::string::npos, "rank %d's error does not name '%s': %s", r,
                  culprit.c_str(), text.c_str());
    bool said = stop ? text.find("did not reach the collective") != std::string::npos ||
                           text.find("sent nothing") != std::string::npos
                     : text.find("died") != std::string::npos;
    ck_assert_msg(said, "rank %d's error does not say what happened to rank %d: %s", r, victim, text.c_str());
  }
  ck_assert_msg(secs < (stop ? 15 : 12), "took %.1f s to notice (timeout 5 s)", secs);
}

static std::string one_node(int) { return "node"; }
static std::string two_per_node(int r) { return "node" + std::to_string(r / 2); }
static std::string own_node(int rank) { return "node" + std::to_string(rank); }

START_TEST(dead_rank_on_same_node) { check_culprit(4, 2, one_node); }
END_TEST

START_TEST(dead_rank_on_other_node) { check_culprit(4, 3, two_per_node); }
END_TEST

START_TEST(dead_leader) { check_culprit(4, 2, two_per_node); }
END_TEST

// Ring links: the neighbours see the victim's links close without a report; the others get
// theirs, forwards or backwards, over two hops at least.
START_TEST(dead_rank_in_a_ring_of_five) { check_culprit(5, 2, own_node); }
END_TEST

START_TEST(dead_rank_among_three_nodes) { check_culprit(6, 5, two_per_node); }
END_TEST

// A stopped rank is alive but silent: its node's other ranks name it from the barriers it did
// not reach, and their report reaches the other node.
START_TEST(stopped_rank_named) { check_culprit(4, 3, two_per_node, true); }
END_TEST

// A stopped leader: its node's other rank names it from the barrier, the other leader from the
// ring transfer it starved.
START_TEST(stopped_leader_named) { check_culprit(4, 2, two_per_node, true); }
END_TEST

static void check_mismatch(int n, std::string (*nodes_of)(int)) {
  auto codes = testing::run_processes(n, [&](int rank, const std::shared_ptr<Store>& store) {
    return classify([&] {
      Communicator comm(store, rank, n, nodes_of(rank), short_timeout());
      std::vector<float> buf(1000, 1.0f);
      size_t count = rank == 1 ? 999 : 1000;  // rank 1 disagrees on the size
      comm.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    });
  });
  for (int r = 0; r < n; ++r)
    ck_assert_msg(codes[static_cast<size_t>(r)] == kMismatch || codes[static_cast<size_t>(r)] == kPeer,
                  "rank %d exited %d, want MismatchError or PeerError", r, codes[static_cast<size_t>(r)]);
}

START_TEST(size_mismatch_one_node) {
  auto codes = testing::run_processes(3, [](int rank, const std::shared_ptr<Store>& store) {
    return classify([&] {
      Communicator comm(store, rank, 3, "node", short_timeout());
      std::vector<double> buf(10);
      comm.allreduce(buf.data(), rank == 1 ? 9 : 10, DataType::kFloat64, ReduceOp::kSum);
    });
  });
  for (int c : codes) ck_assert_int_eq(c, kMismatch);  // every rank sees every header
}
END_TEST

START_TEST(size_mismatch_across_nodes) { check_mismatch(4, two_per_node); }
END_TEST

// Node leaders that disagree find out from the op header that goes ahead of the ring's first
// message (or that finish() reads when a collective sends nothing), before any data is used,
// whichever ring algorithm each side picked: every rank throws, none waits for the timeout.

START_TEST(leaders_disagree) {
  static const size_t kCounts[][2] = {{1000, 999},       // both go around whole
                                      {1000, 200000},    // whole against reduce-scatter
                                      {200000, 199999},  // both reduce-scatter
                                      {1000, 0}};        // one sends nothing at all
  const size_t* counts = kCounts[_i];
  auto start = std::chrono::steady_clock::now();
  auto codes = testing::run_processes(3, [&](int rank, const std::shared_ptr<Store>& store) {
    return classify([&] {
      Communicator comm(store, rank, 3, own_node(rank), short_timeout());
      std::vector<float> buf(200000, 1.0f);
      comm.allreduce(buf.data(), 1000, DataType::kFloat32, ReduceOp::kSum);  // agree once first
      comm.allreduce(buf.data(), counts[rank == 1], DataType::kFloat32, ReduceOp::kSum);
    });
  });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < 3; ++r)
    ck_assert_msg(codes[static_cast<size_t>(r)] == kMismatch || codes[static_cast<size_t>(r)] == kPeer,
                  "case %d: rank %d exited %d, want MismatchError or PeerError", _i, r,
                  codes[static_cast<size_t>(r)]);
  ck_assert_msg(codes[0] == kMismatch || codes[2] == kMismatch || codes[1] == kMismatch,
                "case %d: nobody saw the mismatch", _i);
  ck_assert_msg(secs < 4, "case %d: took %.1f s (timeout 5 s)", _i, secs);
}
END_TEST

START_TEST(missing_rank_times_out) {
  auto start = std::chrono::steady_clock::now();
  auto codes = testing::run_processes(2, [](int rank, const std::shared_ptr<Store>& store) {
    if (rank == 1) return 0;  // never joins
    CommunicatorOptions o;
    o.timeout = Seconds(1);
    return classify([&] { Communicator comm(store, rank, 2, "node", o); });
  });
  ck_assert_int_eq(codes[0], kTimeout);
  ck_assert(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}
END_TEST

START_TEST(broken_communicator_keeps_failing) {
  std::string err = testing::run_threads(2, [](int rank, const std::shared_ptr<Store>& store) {
    Communicator comm(store, rank, 2, "node", short_timeout());
    int32_t x[2] = {1, 2};
    int first = classify([&] { comm.allreduce(x, rank ? 1 : 2, DataType::kInt32, ReduceOp::kSum); });
    int second = classify([&] { comm.allreduce(x, 2, DataType::kInt32, ReduceOp::kSum); });
    if (first != kMismatch || second != kPeer) throw std::runtime_error("wrong error sequence");
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_failure");
  TCase* tc = tcase_create("failure");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, dead_rank_on_same_node);
  tcase_add_test(tc, dead_rank_on_other_node);
  tcase_add_test(tc, dead_leader);
  tcase_add_test(tc, dead_rank_in_a_ring_of_five);
  tcase_add_test(tc, dead_rank_among_three_nodes);
  tcase_add_test(tc, stopped_rank_named);
  tcase_add_test(tc, stopped_leader_named);
  tcase_add_test(tc, size_mismatch_one_node);
  tcase_add_test(tc, size_mismatch_across_nodes);
  tcase_add_loop_test(tc, leaders_disagree, 0, 4);
  tcase_add_test(tc, missing_rank_times_out);
  tcase_add_test(tc, broken_communicator_keeps_failing);
  suite_add_tcase(s, tc);
  return s;
}
