// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Training API: timeline trace contents, gradient fusion (GradientReducer) across bucket sizes,
// learning-rate warm-up, rank-0 checkpoints, check_build; ranks are forked processes using the
// RANK/WORLD_SIZE bootstrap through init().
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <sstream>

#include "libtrain/bootstrap.h"
#include "libtrain/timeline.h"
#include "libtrain/training.h"
#include "ranks.h"
#include "scratch_dir.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;

static int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Runs fn as `n` processes after init() from RANK/WORLD_SIZE (node names from `nodes`).
static void as_ranks(int n, const std::function<int(int)>& fn, const char* timeline = nullptr) {
  std::string port = std::to_string(free_port());
  auto codes = testing::run_processes(n, [&](int rank, const std::shared_ptr<Store>&) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port.c_str(), 1);
    setenv("LIBTRAIN_TIMEOUT", "10", 1);
    setenv("LIBTRAIN_NODE", rank < 2 ? "a" : "b", 1);
    if (timeline) setenv("LIBTRAIN_TIMELINE", timeline, 1);
    init();
    int rc = fn(rank);
    shutdown();
    return rc;
  });
  for (int r = 0; r < n; ++r) ck_assert_msg(codes[static_cast<size_t>(r)] == 0, "rank %d exited %d", r, codes[static_cast<size_t>(r)]);
}

START_TEST(gradient_fusion_averages_every_tensor) {
  as_ranks(3, [](int rank) {
    // sizes straddle the 4 KiB fusion buffer: packed buckets, a lone big tensor, a dtype switch
    std::vector<size_t> sizes = {1, 100, 900, 5000, 3, 0, 2000};
    std::vector<std::vector<float>> grads;
    std::vector<double> g64(17, rank * 3.0);
    std::vector<TensorRef> refs;
    for (size_t s : sizes) grads.emplace_back(s, static_cast<float>(rank));
    for (auto& g : grads) refs.push_back({g.data(), g.size(), DataType::kFloat32});
    refs.push_back({g64.data(), g64.size(), DataType::kFloat64});
    GradientReducer reducer(world(), 4096);
    reducer.reduce(refs);
    for (auto& g : grads)
      for (float v : g) if (v != 1.0f) return 1;
    for (double v : g64) if (v != 3.0) return 2;
    return 0;
  });
}
END_TEST

START_TEST(checkpoint_round_trip_and_broadcast) {
  std::string dir = make_scratch_dir("/tmp/libtrain-ckpt-");
  ck_assert(!dir.empty());
  std::string path = dir + "/model.ckpt";
  as_ranks(3, [&](int rank) {
    std::vector<float> w(10, static_cast<float>(rank + 1));
    std::vector<int64_t> step{rank * 100};
    std::vector<TensorRef> t{{w.data(), w.size(), DataType::kFloat32}, {step.data(), 1, DataType::kInt64}};
    if (load_checkpoint(path, t)) return 1;  // absent on every rank
    broadcast_parameters(t, 1);               // everyone now holds rank 1's values
    save_checkpoint(path, t);
    std::fill(w.begin(), w.end(), -1.0f);
    step[0] = -1;
    if (!load_checkpoint(path, t)) return 2;
    for (float v : w) if (v != 2.0f) return 3;
    return step[0] == 100 ? 0 : 4;
  });
}
END_TEST

START_TEST(timeline_records_collectives) {
  std::string dir = make_scratch_dir("/tmp/libtrain-tl-");
  ck_assert(!dir.empty());
  std::string pattern = dir + "/trace.%r.json";
  as_ranks(2, [](int) {
    std::vector<float> x(64, 1.0f);
    world().allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
    world().allreduce_async(x.data(), x.size(), DataType::kFloat32, ReduceOp::kMax, "my_grads").wait();
    world().barrier();
    return 0;
  }, pattern.c_str());
  for (int r = 0; r < 2; ++r) {
    std::ifstream f(dir + "/trace." + std::to_string(r) + ".json");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string s = ss.str();
    ck_assert_msg(s.rfind("[", 0) == 0 && s.find("]") != std::string::npos, "not a JSON array: %s", s.c_str());
    ck_assert(s.find("\"name\": \"allreduce\"") != std::string::npos);
    ck_assert(s.find("\"name\": \"my_grads\"") != std::string::npos);
    ck_assert(s.find("\"name\": \"barrier\"") != std::string::npos);
    ck_assert(s.find("\"bytes\": 256") != std::string::npos);
    ck_assert(s.find("\"pid\": " + std::to_string(r)) != std::string::npos);
  }
}
END_TEST

START_TEST(timeline_path_pattern) {
  ck_assert_str_eq(Timeline::path_for_rank("t.json", 0).c_str(), "t.json");
  ck_assert_str_eq(Timeline::path_for_rank("t.json", 1).c_str(), "");
  ck_assert_str_eq(Timeline::path_for_rank("t.%r.json", 3).c_str(), "t.3.json");
}
END_TEST

START_TEST(learning_rate_warmup) {
  ck_assert(scaled_learning_rate(0.1, 8, 0, 5) == 0.1);
  ck_assert(std::fabs(scaled_learning_rate(0.1, 8, 2.5, 5) - 0.45) < 1e-12);
  ck_assert(std::fabs(scaled_learning_rate(0.1, 8, 7, 5) - 0.8) < 1e-12);
  ck_assert(std::fabs(scaled_learning_rate(0.1, 4, 0, 0) - 0.4) < 1e-12);
}
END_TEST

START_TEST(check_build_lists_components) {
  auto parts = check_build();
  auto has = [&](const char* p) { return std::find(parts.begin(), parts.end(), p) != parts.end(); };
  ck_assert(has("bootstrap:env") && has("bootstrap:single") && has("transport:shm") && has("transport:tcp"));
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_training");
  TCase* tc = tcase_create("training");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, gradient_fusion_averages_every_tensor);
  tcase_add_test(tc, checkpoint_round_trip_and_broadcast);
  tcase_add_test(tc, timeline_records_collectives);
  tcase_add_test(tc, timeline_path_pattern);
  tcase_add_test(tc, learning_rate_warmup);
  tcase_add_test(tc, check_build_lists_components);
  suite_add_tcase(s, tc);
  return s;
}
