// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Who failed, on NCCL (libtrain/docs/errors.md, "Who failed"; issue 26): NCCL says only "remote
// process exited" or hangs, so a failed NCCL collective asks the CPU communicator over the same
// ranks, and every surviving rank's error names the rank, and its node, that died. Runs on the
// NCCL and CUDA runtime stand-in (standin_nccl.c, through LD_LIBRARY_PATH): forked ranks, host
// memory as device memory. Skipped (77) when libtrain was built without NCCL.
#include <signal.h>

#include <chrono>
#include <vector>

#include "libtrain/communicator.h"
#include "libtrain/nccl.h"
#include "ranks.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;

enum Exit { kOk = 0, kPeer = 10, kTimeout = 12, kOther = 13, kWrongSum = 14 };

// A fresh directory for the stand-in's communicators (STANDIN_NCCL_DIR) and each rank's message.
class Scratch : public testing::Messages {
 public:
  Scratch() {
    setenv("STANDIN_NCCL_DIR", dir().c_str(), 1);
    setenv("STANDIN_CUDA_DEVICES", "4", 1);  // one per rank: the "nodes" are all this host
  }
};

static std::string two_per_node(int r) { return "node" + std::to_string(r / 2); }

// 4 ranks on 2 nodes, NCCL timeout 3 s and CPU timeout 5 s: one allreduce that must sum right,
// then rank `victim` (unless -1) is killed and the others allreduce again on NCCL. With `peers`
// false the NCCL communicator is not given the CPU one (what libtrain did before).
static std::vector<int> run(const Scratch& scratch, int victim, bool peers) {
  return testing::run_processes(4, [&](int rank, const std::shared_ptr<Store>& store) {
    int code = kOk;
    try {
      CommunicatorOptions o;
      o.timeout = Seconds(5);
      Communicator cpu(store, rank, 4, two_per_node(rank), o);
      NcclCommunicator nccl(*store, rank, 4, rank % 2, Seconds(3), rank, peers ? &cpu : nullptr);
      std::vector<float> buf(1000, static_cast<float>(rank + 1));
      nccl.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      nccl.synchronize();
      if (buf[0] != 10.0f || buf[999] != 10.0f) return static_cast<int>(kWrongSum);
      if (rank == victim) raise(SIGKILL);
      if (victim < 0) return static_cast<int>(kOk);
      nccl.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      nccl.synchronize();
    } catch (const PeerError& e) {
      scratch.write(rank, e.what());
      code = kPeer;
    } catch (const TimeoutError& e) {
      scratch.write(rank, e.what());
      code = kTimeout;
    } catch (const std::exception& e) {
      scratch.write(rank, e.what());
      code = kOther;
    }
    return code;
  });
}

static bool have_standin() {
  if (!nccl_available()) return false;
  const char* path = getenv("LD_LIBRARY_PATH");
  return path && std::string(path).find("standin-nccl") != std::string::npos;
}

// Every rank but the victim fails in time, naming it and its node, with NCCL's words after.
static void check_named(int victim, const char* nccl_words) {
  Scratch scratch;
  auto start = std::chrono::steady_clock::now();
  auto codes = run(scratch, victim, true);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string culprit = "rank " + std::to_string(victim) + " on node " + two_per_node(victim) + " ";
  for (int r = 0; r < 4; ++r) {
    int code = codes[static_cast<size_t>(r)];
    std::string text = scratch.read(r);
    if (r == victim) {
      ck_assert_int_eq(code, 128 + SIGKILL);
      continue;
    }
    ck_assert_msg(code == kPeer, "rank %d exited %d, want a PeerError: %s", r, code, text.c_str());
    ck_assert_msg(text.find(culprit) != std::string::npos && text.find("died") != std::string::npos,
                  "rank %d's error does not say that %s died: %s", r, culprit.c_str(), text.c_str());
    ck_assert_msg(text.find(nccl_words) != std::string::npos, "rank %d's error lacks NCCL's '%s': %s", r,
                  nccl_words, text.c_str());
  }
  ck_assert_msg(secs < 15, "took %.1f s to fail (NCCL timeout 3 s, CPU 5 s)", secs);
}

START_TEST(collectives_work_on_the_standin) {
  if (!have_standin()) return;
  Scratch scratch;
  auto codes = run(scratch, -1, true);
  for (int r = 0; r < 4; ++r)
    ck_assert_msg(codes[static_cast<size_t>(r)] == kOk, "rank %d exited %d: %s", r, codes[static_cast<size_t>(r)],
                  scratch.read(r).c_str());
}
END_TEST

// NCCL reports the death (ncclRemoteError) on every survivor.
START_TEST(dead_rank_on_other_node_named) {
  if (!have_standin()) return;
  check_named(3, "(NCCL: NCCL collective: remote process exited");
}
END_TEST

START_TEST(dead_rank_on_same_node_named) {
  if (!have_standin()) return;
  check_named(1, "(NCCL: NCCL collective: remote process exited");
}
END_TEST

// NCCL never notices: the timeout ends the wait, and the CPU communicator still names the victim.
START_TEST(dead_rank_named_after_a_hang) {
  if (!have_standin()) return;
  setenv("STANDIN_NCCL_ON_DEATH", "hang", 1);
  check_named(2, "(NCCL: NCCL collective did not finish within LIBTRAIN_TIMEOUT");
  unsetenv("STANDIN_NCCL_ON_DEATH");
}
END_TEST

// Without the CPU communicator, NCCL's words are all there is: what the tests above rule out.
START_TEST(without_peers_only_nccl_speaks) {
  if (!have_standin()) return;
  Scratch scratch;
  auto codes = run(scratch, 3, false);
  for (int r = 0; r < 3; ++r) {
    std::string text = scratch.read(r);
    ck_assert_msg(codes[static_cast<size_t>(r)] == kPeer, "rank %d: %s", r, text.c_str());
    ck_assert_msg(text.find("rank 3") == std::string::npos, "rank %d names the victim: %s", r, text.c_str());
  }
}
END_TEST

// A communicator that failed keeps failing, with the same words, and never calls NCCL again.
START_TEST(failed_communicator_keeps_failing) {
  if (!have_standin()) return;
  Scratch scratch;
  auto codes = testing::run_processes(2, [&](int rank, const std::shared_ptr<Store>& store) {
    Communicator cpu(store, rank, 2, "node", CommunicatorOptions{});
    NcclCommunicator nccl(*store, rank, 2, rank, Seconds(3), rank, &cpu);
    float x = 1;
    if (rank == 1) raise(SIGKILL);
    std::string first;
    try {
      nccl.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
      nccl.synchronize();
    } catch (const PeerError& e) {
      first = e.what();
    }
    try {
      nccl.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    } catch (const PeerError& e) {
      scratch.write(rank, e.what());
      return std::string(e.what()).find("failed earlier (" + first + ")") != std::string::npos && !first.empty()
                 ? 0 : 2;
    }
    return 3;
  });
  ck_assert_msg(codes[0] == 0, "rank 0 exited %d: %s", codes[0], scratch.read(0).c_str());
}
END_TEST

Suite* make_suite(void) {
  if (!have_standin()) {
    std::printf("SKIP: libtrain built without NCCL, or the stand-in is not on LD_LIBRARY_PATH\n");
    std::exit(77);
  }
  Suite* s = suite_create("libtrain_nccl_culprit");
  TCase* tc = tcase_create("nccl");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, collectives_work_on_the_standin);
  tcase_add_test(tc, dead_rank_on_other_node_named);
  tcase_add_test(tc, dead_rank_on_same_node_named);
  tcase_add_test(tc, dead_rank_named_after_a_hang);
  tcase_add_test(tc, without_peers_only_nccl_speaks);
  tcase_add_test(tc, failed_communicator_keeps_failing);
  suite_add_tcase(s, tc);
  return s;
}
