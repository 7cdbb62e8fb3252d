// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Ranks that share a GPU are named before NCCL starts (libtrain/src/gpu_sharing.h): which GPU,
// which ranks, on which host, and how many ranks per node that host's GPUs allow.
#include <string>
#include <vector>

#include "gpu_sharing.h"

#include "check_main.h"  // last: check.h defines a fail() macro

using libtrain::RankGpu;

START_TEST(own_gpus_are_fine) {
  std::vector<RankGpu> g = {{0, "gpu01", "0000:3B:00.0"}, {1, "gpu01", "0000:5E:00.0"},
                            {2, "gpu02", "0000:3B:00.0"}, {3, "gpu02", "0000:5E:00.0"}};
  ck_assert(libtrain::shared_gpu_message(g).empty());
  ck_assert(libtrain::shared_gpu_message({}).empty());
}
END_TEST

START_TEST(four_ranks_on_one_gpu) {
  std::vector<RankGpu> g;
  for (int r = 0; r < 4; ++r) g.push_back({r, "h100", "00000000:00:06.0"});
  ck_assert_str_eq(libtrain::shared_gpu_message(g).c_str(),
                   "libtrain: ranks 0, 1, 2 and 3 share GPU 00000000:00:06.0 on h100, but NCCL "
                   "needs a GPU of its own for every rank; run at most 1 rank per node there "
                   "(srun --ntasks-per-node=1), or give each rank its own GPU (srun "
                   "--gpus-per-task=1, or --dl-gpus=1)");
}
END_TEST

START_TEST(the_lowest_shared_rank_is_named_with_its_host) {
  std::vector<RankGpu> g = {{0, "a", "0000:01:00.0"}, {1, "a", "0000:02:00.0"},
                            {2, "b", "0000:01:00.0"}, {5, "b", "0000:02:00.0"},
                            {4, "b", "0000:01:00.0"}, {3, "a", "0000:02:00.0"}};
  ck_assert_str_eq(libtrain::shared_gpu_message(g).c_str(),
                   "libtrain: ranks 1 and 3 share GPU 0000:02:00.0 on a, but NCCL needs a GPU of "
                   "its own for every rank; run at most 2 ranks per node there (srun "
                   "--ntasks-per-node=2), or give each rank its own GPU (srun --gpus-per-task=1, "
                   "or --dl-gpus=1)");
  RankGpu back = libtrain::decode_rank_gpu(7, libtrain::encode_rank_gpu({7, "node1", "0000:3B:00.0"}));
  ck_assert(back.rank == 7 && back.host == "node1" && back.bus_id == "0000:3B:00.0");
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_gpu_sharing");
  TCase* tc = tcase_create("sharing");
  tcase_add_test(tc, own_gpus_are_fine);
  tcase_add_test(tc, four_ranks_on_one_gpu);
  tcase_add_test(tc, the_lowest_shared_rank_is_named_with_its_host);
  suite_add_tcase(s, tc);
  return s;
}
