// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Allreduce over 1-8 ranks (threads, one InMemoryStore): every dtype x op x awkward count,
// checked against closed-form values; on one node (shared memory through the slots, or
// cross-memory attach) and on fake nodes (shared memory plus the TCP ring over loopback).
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ranks.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;

static const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                   DataType::kBFloat16, DataType::kInt32, DataType::kInt64};
static const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax};

static void check_one(Communicator& comm, int n, size_t count, DataType dtype, ReduceOp op) {
  std::vector<uint8_t> buf(count * dtype_size(dtype) + 1);
  for (size_t i = 0; i < count; ++i) testing::store_value(buf.data(), dtype, i, testing::value_of(comm.rank(), i));
  comm.allreduce(buf.data(), count, dtype, op);
  for (size_t i = 0; i < count; ++i) {
    double want = testing::expected(op, dtype, n, i), got = testing::load_value(buf.data(), dtype, i);
    if (std::fabs(got - want) > testing::tolerance(dtype, want))
      throw std::runtime_error(std::string("allreduce ") + op_name(op) + " " + dtype_name(dtype) +
                               " count " + std::to_string(count) + " element " + std::to_string(i) +
                               ": got " + std::to_string(got) + ", want " + std::to_string(want));
  }
}

// Every combination for n ranks; `ranks_per_node` 0 puts all on one node. `cma_min` 1 sends
// every in-node collective through process_vm_readv (threads of one process read their own
// pid's memory, which exercises the same code), 0 none. `one_phase` forces the slot algorithm:
// 0 = always two barriers per chunk, kAuto = whatever the machine's shape picks. `ring_whole`
// forces the leaders' ring algorithm likewise: 0 = always reduce-scatter + allgather.
static void sweep(int n, int ranks_per_node, size_t cma_min = 0, size_t one_phase = kAuto,
                  size_t ring_whole = kAuto) {
  std::string err = testing::run_threads(n, [&](int rank, const std::shared_ptr<Store>& store) {
    CommunicatorOptions opts;
    opts.timeout = Seconds(20);
    opts.shm_chunk_bytes = 4096;  // small slots: "large" counts cross many pipeline chunks
    opts.cma_min_bytes = cma_min;
    opts.shm_one_phase_bytes = one_phase;
    opts.ring_whole_bytes = ring_whole;
    std::string node = ranks_per_node ? "node" + std::to_string(rank / ranks_per_node) : "node";
    Communicator comm(store, rank, n, node, opts);
    for (size_t count : testing::counts_for(n, 3001))
      for (DataType dtype : kDtypes)
        for (ReduceOp op : kOps) check_one(comm, n, count, dtype, op);
  });
  ck_assert_msg(err.empty(), "%d ranks (%d per node): %s", n, ranks_per_node, err.c_str());
}

START_TEST(one_node_1_to_8_ranks) { sweep(_i, 0); }
END_TEST

// Each algorithm on its own, whatever the machine: the two-phase one stages only its peers'
// slices and reads its own from its buffer; the one-phase one reduces in place.
START_TEST(one_node_two_phase_1_to_8_ranks) { sweep(_i, 0, 0, 0); }
END_TEST

START_TEST(one_node_one_phase_1_to_8_ranks) { sweep(_i, 0, 0, 1 << 20); }
END_TEST

// All ranks pinned to one CPU: the group sees itself oversubscribed, so waiters yield (or, with
// a yield budget of 0, sleep at once), chunks shrink to 256 KiB in the default 512 KiB slots and
// every chunk takes two barriers. Counts straddle the 256 KiB chunk and the 512 KiB slot.
static void oversubscribed(int n, int64_t yield_us) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);  // threads inherit it
  std::string err = testing::run_threads(n, [&](int rank, const std::shared_ptr<Store>& store) {
    CommunicatorOptions opts;
    opts.timeout = Seconds(20);
    opts.shm_yield_us = yield_us;
    Communicator comm(store, rank, n, "node", opts);
    for (size_t count : {size_t{0}, size_t{1}, size_t(n + 1), size_t{65535}, size_t{65536 * 3 + 7},
                         size_t{262144 + 1}})
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64})
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) check_one(comm, n, count, dtype, op);
  });
  ck_assert_msg(err.empty(), "%d ranks on one CPU, yield %lld us: %s", n,
                static_cast<long long>(yield_us), err.c_str());
}

START_TEST(oversubscribed_ranks_yield) {
  static const int kRanks[] = {2, 3, 4};
  oversubscribed(kRanks[_i], 20000);
}
END_TEST

START_TEST(oversubscribed_ranks_sleep_at_once) { oversubscribed(3, 0); }
END_TEST

START_TEST(fake_nodes_hierarchical) {
  static const int kCases[][2] = {{2, 1}, {3, 1}, {4, 2}, {5, 2}, {6, 3}, {8, 4}};
  sweep(kCases[_i][0], kCases[_i][1]);
}
END_TEST

// Each ring algorithm on its own, over 2 to 5 leaders (the automatic choice sends every count
// above whole, as the sweep's buffers are small).
static const int kRingCases[][2] = {{2, 1}, {3, 1}, {5, 1}, {6, 2}, {8, 2}};

START_TEST(fake_nodes_ring_reduce_scatter) { sweep(kRingCases[_i][0], kRingCases[_i][1], 0, kAuto, 0); }
END_TEST

START_TEST(fake_nodes_ring_whole) {
  sweep(kRingCases[_i][0], kRingCases[_i][1], 0, kAuto, size_t{1} << 40);
}
END_TEST

// Float sums depend on their order; data-parallel replicas stay identical only if every rank
// gets the same bits. Values of very different magnitudes make any difference in order show.
START_TEST(fake_nodes_bit_identical_results) {
  static const int kCases[][2] = {{3, 1}, {4, 1}, {6, 2}};
  int n = kCases[_i % 3][0], per_node = kCases[_i % 3][1];
  size_t whole = _i < 3 ? size_t{1} << 40 : 0;
  std::vector<std::vector<float>> results(static_cast<size_t>(n));
  std::string err = testing::run_threads(n, [&](int rank, const std::shared_ptr<Store>& store) {
    CommunicatorOptions opts;
    opts.timeout = Seconds(20);
    opts.ring_whole_bytes = whole;
    Communicator comm(store, rank, n, "node" + std::to_string(rank / per_node), opts);
    std::vector<float> buf(1001);
    for (size_t i = 0; i < buf.size(); ++i)
      buf[i] = static_cast<float>((rank % 3 == 0 ? 1e8 : rank % 3 == 1 ? -1e8 : 3.3) * (1.0 + 0.01 * static_cast<double>(i))) +
               0.7f * static_cast<float>(rank);
    comm.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    results[static_cast<size_t>(rank)] = buf;
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
  for (int r = 1; r < n; ++r)
    ck_assert_msg(std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(),
                              results[0].size() * sizeof(float)) == 0,
                  "%d ranks, %d per node, %s: rank %d's sums differ from rank 0's", n, per_node,
                  whole ? "whole" : "reduce-scatter", r);
}
END_TEST

// An average is the sum divided once, with apply_average()'s arithmetic, whichever stage divides
// (the ring's reduce-scatter or whole pass, the node's slots in one or two phases, or cross-memory
// attach): bit for bit the rank's own sum divided afterwards, on every rank. Dividing a partial
// sum would round differently (floats) or truncate differently (integers).
START_TEST(average_is_the_sum_divided_once) {
  struct Case {
    const char* what;
    int n, per_node;
    size_t cma_min, one_phase, ring_whole;
  };
  static const Case kCases[] = {
      {"one node, two phases", 4, 0, 0, 0, kAuto},       {"one node, one phase", 3, 0, 0, 1 << 20, kAuto},
      {"one node, CMA", 3, 0, 1, kAuto, kAuto},           {"ring reduce-scatter", 4, 1, 0, kAuto, 0},
      {"ring whole", 3, 1, 0, kAuto, size_t{1} << 40},    {"hierarchical", 6, 2, 0, kAuto, 0},
      {"hierarchical, CMA", 4, 2, 1, kAuto, 0}};
  const Case& c = kCases[_i];
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
    std::string err = testing::run_threads(c.n, [&](int rank, const std::shared_ptr<Store>& store) {
      CommunicatorOptions opts;
      opts.timeout = Seconds(20);
      opts.shm_chunk_bytes = 4096;
      opts.cma_min_bytes = c.cma_min;
      opts.shm_one_phase_bytes = c.one_phase;
      opts.ring_whole_bytes = c.ring_whole;
      std::string node = c.per_node ? "node" + std::to_string(rank / c.per_node) : "node";
      Communicator comm(store, rank, c.n, node, opts);
      const size_t count = 200003;  // many 64 KiB ring pieces and 4 KiB slots, uneven splits
      std::vector<uint8_t> sum(count * dtype_size(dtype)), avg;
      for (size_t i = 0; i < count; ++i)
        testing::store_value(sum.data(), dtype, i, (rank % 2 ? -1.0 : 1.0) * (1000.0 + 0.37 * static_cast<double>(i % 977)) +
                                                       0.11 * rank);
      avg = sum;
      comm.allreduce(sum.data(), count, dtype, ReduceOp::kSum);
      comm.allreduce(avg.data(), count, dtype, ReduceOp::kAverage);
      apply_average(sum.data(), count, dtype, c.n);
      if (sum != avg) throw std::runtime_error(std::string(dtype_name(dtype)) + ": average differs from sum / n");
    });
    ck_assert_msg(err.empty(), "%s: %s", c.what, err.c_str());
  }
}
END_TEST

// The leaders' ring streams its 2(n-1) messages, each leaving as soon as the one it depends on
// has come in: counts whose segments span many 64 KiB reduction pieces, uneven ones, and several
// collectives in a row on the same links (each must start where the last one left the streams).
START_TEST(fake_nodes_ring_stream_large_counts) {
  static const int kLeaders[] = {2, 3, 4};
  int n = kLeaders[_i];
  std::string err = testing::run_threads(n, [&](int rank, const std::shared_ptr<Store>& store) {
    CommunicatorOptions opts;
    opts.timeout = Seconds(20);
    opts.ring_whole_bytes = 0;
    Communicator comm(store, rank, n, "node" + std::to_string(rank), opts);
    for (size_t count : {size_t{262144}, size_t{(1 << 20) + 13}, size_t{65536 * 3 + 7}, size_t{100003}})
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64})
        check_one(comm, n, count, dtype, ReduceOp::kSum);
  });
  ck_assert_msg(err.empty(), "%d leaders: %s", n, err.c_str());
}
END_TEST

START_TEST(one_node_cma_1_to_8_ranks) { sweep(_i, 0, 1); }
END_TEST

START_TEST(fake_nodes_cma) {
  static const int kCases[][2] = {{3, 3}, {4, 2}, {7, 3}};
  sweep(kCases[_i][0], kCases[_i][1], 1);
}
END_TEST

// Separate processes, as under srun: CMA between real pids, sizes around the threshold.
START_TEST(cma_between_processes) {
  auto codes = testing::run_processes(3, [](int rank, const std::shared_ptr<Store>& store) {
    CommunicatorOptions opts;
    opts.timeout = Seconds(20);
    opts.cma_min_bytes = 4096;
    Communicator comm(store, rank, 3, "node", opts);
    for (size_t count : {size_t{1023}, size_t{1024}, size_t{1025}, size_t{300001}}) {
      std::vector<float> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(testing::value_of(rank, i));
      comm.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != static_cast<float>(testing::expected(ReduceOp::kSum, DataType::kFloat32, 3, i))) return 1;
      comm.broadcast(buf.data(), count, DataType::kFloat32, 2);
    }
    return 0;
  });
  for (int c : codes) ck_assert_int_eq(c, 0);
}
END_TEST

START_TEST(async_handles_complete_in_order) {
  std::string err = testing::run_threads(4, [](int rank, const std::shared_ptr<Store>& store) {
    Communicator comm(store, rank, 4, "node");
    std::vector<std::vector<float>> bufs(8, std::vector<float>(1000, static_cast<float>(rank)));
    std::vector<Work> works;
    for (auto& b : bufs) works.push_back(comm.allreduce_async(b.data(), b.size(), DataType::kFloat32, ReduceOp::kSum));
    for (auto& w : works) w.wait();
    for (auto& b : bufs)
      for (float v : b)
        if (v != 6.0f) throw std::runtime_error("async allreduce gave " + std::to_string(v));
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

// Voluntary context switches of every thread of this process but the calling one.
static long other_threads_switches() {
  long total = 0;
  std::string self = std::to_string(syscall(SYS_gettid));
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    if (e.path().filename() == self) continue;
    std::ifstream in(e.path() / "status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) total += std::stol(line.substr(24));
  }
  return total;
}

// A synchronous collective runs on the caller's thread; the background worker (there for the
// asynchronous ones) must sleep through it, not be woken for nothing each time.
START_TEST(sync_collectives_leave_the_worker_asleep) {
  std::string err = testing::run_threads(1, [](int rank, const std::shared_ptr<Store>& store) {
    Communicator comm(store, rank, 1, "node");
    float x[4] = {1, 2, 3, 4};
    comm.allreduce(x, 4, DataType::kFloat32, ReduceOp::kSum);
    long before = other_threads_switches();
    for (int i = 0; i < 500; ++i) {
      comm.allreduce(x, 4, DataType::kFloat32, ReduceOp::kSum);
      usleep(100);  // as a training step would: a worker woken for nothing goes back to sleep
    }
    long woken = other_threads_switches() - before;
    if (woken > 5)
      throw std::runtime_error("the worker woke " + std::to_string(woken) + " times in 500 synchronous allreduces");
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

START_TEST(large_buffer_float32) {
  std::string err = testing::run_threads(3, [](int rank, const std::shared_ptr<Store>& store) {
    Communicator comm(store, rank, 3, "node");  // default 512 KiB slots
    std::vector<float> buf(3 * 1000 * 1000 + 7);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(testing::value_of(rank, i));
    comm.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    for (size_t i = 0; i < buf.size(); ++i)
      if (buf[i] != static_cast<float>(testing::expected(ReduceOp::kSum, DataType::kFloat32, 3, i)))
        throw std::runtime_error("wrong value at " + std::to_string(i));
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

START_TEST(invalid_op_for_dtype_is_rejected) {
  std::string err = testing::run_threads(1, [](int rank, const std::shared_ptr<Store>& store) {
    Communicator comm(store, rank, 1, "node");
    float x = 1;
    try {
      comm.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kBitOr);
    } catch (const InvalidArgument&) {
      return;
    }
    throw std::runtime_error("bitor on float32 was accepted");
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

START_TEST(half_conversions_round_to_nearest_even) {
  ck_assert_uint_eq(float_to_half(1.0f), 0x3c00);
  ck_assert_uint_eq(float_to_half(65504.0f), 0x7bff);
  ck_assert_uint_eq(float_to_half(1e6f), 0x7c00);
  ck_assert_uint_eq(float_to_half(5.9604645e-8f), 0x0001);  // smallest subnormal
  ck_assert_uint_eq(float_to_half(1.0f + 1.0f / 2048), 0x3c00);  // tie rounds to even
  ck_assert(half_to_float(0x0001) == 5.9604645e-8f);
  ck_assert(half_to_float(0xc000) == -2.0f);
  ck_assert_uint_eq(float_to_bfloat16(1.0f), 0x3f80);
  ck_assert(bfloat16_to_float(0x4049) == 3.140625f);
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_allreduce");
  TCase* tc = tcase_create("allreduce");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, one_node_1_to_8_ranks, 1, 9);
  tcase_add_loop_test(tc, one_node_two_phase_1_to_8_ranks, 1, 9);
  tcase_add_loop_test(tc, one_node_one_phase_1_to_8_ranks, 1, 9);
  tcase_add_loop_test(tc, oversubscribed_ranks_yield, 0, 3);
  tcase_add_test(tc, oversubscribed_ranks_sleep_at_once);
  tcase_add_loop_test(tc, fake_nodes_hierarchical, 0, 6);
  tcase_add_loop_test(tc, fake_nodes_ring_reduce_scatter, 0, 5);
  tcase_add_loop_test(tc, fake_nodes_ring_whole, 0, 5);
  tcase_add_loop_test(tc, fake_nodes_bit_identical_results, 0, 6);
  tcase_add_loop_test(tc, fake_nodes_ring_stream_large_counts, 0, 3);
  tcase_add_loop_test(tc, average_is_the_sum_divided_once, 0, 7);
  tcase_add_loop_test(tc, one_node_cma_1_to_8_ranks, 1, 9);
  tcase_add_loop_test(tc, fake_nodes_cma, 0, 3);
  tcase_add_test(tc, cma_between_processes);
  tcase_add_test(tc, async_handles_complete_in_order);
  tcase_add_test(tc, sync_collectives_leave_the_worker_asleep);
  tcase_add_test(tc, large_buffer_float32);
  tcase_add_test(tc, invalid_op_for_dtype_is_rejected);
  tcase_add_test(tc, half_conversions_round_to_nearest_even);
  suite_add_tcase(s, tc);
  return s;
}
