// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// GPU test (label `gpu`): on a node with an NVIDIA GPU, the real /dev and /proc give GPUs with
// their PCI address, a task plan binds them, and the host's ld.so cache has libcuda. Without a GPU
// it exits 77 (skipped) and says why: it never passes on a machine that cannot run it.
#include <unistd.h>

#include <cstdio>

#include <fstream>
#include <check.h>
#include <stdlib.h>
#include "dl/gpu.h"
#include "dl/nvidia_env.h"

using namespace slipway::launcher;

static int skip_without_gpu() {
  if (access("/dev/nvidiactl", F_OK) == 0 && !node_gpus("/").empty()) return 0;
  fprintf(stderr, "SKIPPED: no NVIDIA GPU on this machine (/dev/nvidiactl, /dev/nvidiaN absent)\n");
  return 77;
}

START_TEST(real_gpus_are_found_and_planned) {
  auto node = node_gpus("/");
  ck_assert(!node.empty());
  ck_assert_msg(!node[0].pci_bus_id.empty(), "no /proc/driver/nvidia/gpus entry for GPU %d",
                node[0].minor);
  auto plan = plan_gpu_task("/", node, {node[0].minor}, "");
  ck_assert(!plan.binds.empty());
  auto cache = LdCache::load("/etc/ld.so.cache");
  ck_assert(cache.ok() && cache->find("libcuda.so.1"));
  ck_assert(!driver_binds("/", *cache, kCapCompute | kCapUtility, "/usr/lib/x86_64-linux-gnu").empty());
}
END_TEST

static Suite* make_suite(void) {
  Suite* s = suite_create("dl_gpu_real");
  TCase* tc = tcase_create("gpu");
  tcase_add_test(tc, real_gpus_are_found_and_planned);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  if (int skip = skip_without_gpu()) return skip;
  SRunner* runner = srunner_create(make_suite());
  srunner_run_all(runner, CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
