// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Broadcast, allgather and barrier over 1-8 ranks (threads), one node and fake nodes, at the
// awkward counts; every root for broadcast. Expected values in closed form.
#include <vector>

#include "ranks.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;

static const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                   DataType::kBFloat16, DataType::kInt32, DataType::kInt64};

static void check_broadcast(Communicator& comm, size_t count, DataType dtype, int root) {
  std::vector<uint8_t> buf(count * dtype_size(dtype) + 1, 0xab);
  if (comm.rank() == root)
    for (size_t i = 0; i < count; ++i) testing::store_value(buf.data(), dtype, i, testing::value_of(root, i));
  comm.broadcast(buf.data(), count, dtype, root);
  for (size_t i = 0; i < count; ++i)
    if (testing::load_value(buf.data(), dtype, i) != testing::value_of(root, i))
      throw std::runtime_error(std::string("broadcast ") + dtype_name(dtype) + " count " +
                               std::to_string(count) + " root " + std::to_string(root) +
                               " wrong at " + std::to_string(i));
}

static void check_allgather(Communicator& comm, size_t count, DataType dtype) {
  size_t esize = dtype_size(dtype), n = static_cast<size_t>(comm.size());
  std::vector<uint8_t> in(count * esize + 1), out(n * count * esize + 1, 0xcd);
  for (size_t i = 0; i < count; ++i) testing::store_value(in.data(), dtype, i, testing::value_of(comm.rank(), i));
  comm.allgather(in.data(), out.data(), count, dtype);
  for (size_t r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      if (testing::load_value(out.data(), dtype, r * count + i) != testing::value_of(static_cast<int>(r), i))
        throw std::runtime_error(std::string("allgather ") + dtype_name(dtype) + " count " +
                                 std::to_string(count) + " wrong for rank " + std::to_string(r));
}

// `cma_min` 1: every in-node collective reads peers' buffers with process_vm_readv; 0: never.
static void sweep(int n, int ranks_per_node, size_t cma_min = 0) {
  std::string err = testing::run_threads(n, [&](int rank, const std::shared_ptr<Store>& store) {
    CommunicatorOptions opts;
    opts.timeout = Seconds(20);
    opts.shm_chunk_bytes = 4096;
    opts.cma_min_bytes = cma_min;
    std::string node = ranks_per_node ? "node" + std::to_string(rank / ranks_per_node) : "node";
    Communicator comm(store, rank, n, node, opts);
    for (size_t count : testing::counts_for(n, 2501))
      for (DataType dtype : kDtypes) {
        for (int root = 0; root < n; ++root) check_broadcast(comm, count, dtype, root);
        check_allgather(comm, count, dtype);
        comm.barrier();
      }
  });
  ck_assert_msg(err.empty(), "%d ranks (%d per node): %s", n, ranks_per_node, err.c_str());
}

START_TEST(one_node_1_to_8_ranks) { sweep(_i, 0); }
END_TEST

START_TEST(fake_nodes_hierarchical) {
  static const int kCases[][2] = {{2, 1}, {3, 2}, {4, 2}, {7, 3}};
  sweep(kCases[_i][0], kCases[_i][1]);
}
END_TEST

START_TEST(one_node_cma_1_to_8_ranks) { sweep(_i, 0, 1); }
END_TEST

START_TEST(fake_nodes_cma) { sweep(4, 2, 1); }
END_TEST

START_TEST(in_place_allgather) {
  std::string err = testing::run_threads(3, [](int rank, const std::shared_ptr<Store>& store) {
    Communicator comm(store, rank, 3, rank == 2 ? "b" : "a");
    std::vector<int32_t> buf(3 * 5, -1);
    for (int i = 0; i < 5; ++i) buf[static_cast<size_t>(rank * 5 + i)] = rank * 100 + i;
    comm.allgather(buf.data() + rank * 5, buf.data(), 5, DataType::kInt32);
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 5; ++i)
        if (buf[static_cast<size_t>(r * 5 + i)] != r * 100 + i) throw std::runtime_error("in-place allgather wrong");
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

START_TEST(barrier_orders_ranks) {
  std::atomic<int> arrived{0};
  std::string err = testing::run_threads(5, [&](int rank, const std::shared_ptr<Store>& store) {
    Communicator comm(store, rank, 5, rank < 3 ? "a" : "b");
    if (rank == 4) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    arrived.fetch_add(1);
    comm.barrier();
    if (arrived.load() != 5) throw std::runtime_error("left the barrier before everyone arrived");
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

START_TEST(topology_from_node_names) {
  std::string err = testing::run_threads(5, [&](int rank, const std::shared_ptr<Store>& store) {
    static const char* const kNodes[] = {"b", "a", "b", "c", "a"};
    Communicator comm(store, rank, 5, kNodes[rank]);
    static const int kLocalRank[] = {0, 0, 1, 0, 1}, kLocalSize[] = {2, 2, 2, 1, 2}, kNode[] = {0, 1, 0, 2, 1};
    const Topology& t = comm.topology();
    if (t.local_rank != kLocalRank[rank] || t.local_size != kLocalSize[rank] ||
        t.node_index != kNode[rank] || t.node_count != 3)
      throw std::runtime_error("wrong topology");
  });
  ck_assert_msg(err.empty(), "%s", err.c_str());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_collectives");
  TCase* tc = tcase_create("collectives");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, one_node_1_to_8_ranks, 1, 9);
  tcase_add_loop_test(tc, fake_nodes_hierarchical, 0, 4);
  tcase_add_loop_test(tc, one_node_cma_1_to_8_ranks, 1, 9);
  tcase_add_test(tc, fake_nodes_cma);
  tcase_add_test(tc, in_place_allgather);
  tcase_add_test(tc, barrier_orders_ranks);
  tcase_add_test(tc, topology_from_node_names);
  suite_add_tcase(s, tc);
  return s;
}
