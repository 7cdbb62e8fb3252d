// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for launcher/dl/gpu.h against fake device trees: the step's GPUs from Slurm's
// variables, selection by local rank for 1, 2, 4, 8 tasks x 1..8 GPUs x N = 1, 2, auto,
// non-contiguous and reordered GRES lists, too few GPUs, and the binds and environment of a task.
#include <algorithm>
#include <set>
#include <string>

#include "dl/gpu.h"
#include "dl/nvidia_env.h"
#include "dl_test_util.h"

#include "check_main.h"  // last: check.h defines a fail() macro

using namespace slipway::launcher;

static StepGpus all_gpus(int n) {
  StepGpus s;
  for (int i = 0; i < n; ++i) s.minors.push_back(i);
  s.source = "test";
  return s;
}

// Every feasible combination: each local rank gets a disjoint group of the right size, in order;
// every infeasible one fails, for every rank, with a message naming the option and the fix.
START_TEST(selection_matrix) {
  for (int tasks : {1, 2, 4, 8})
    for (int gpus = 1; gpus <= 8; ++gpus)
      for (int n : {1, 2, 0 /* auto */}) {
        GpuRequest req;
        req.mode = n == 0 ? GpuRequest::Mode::kAuto : GpuRequest::Mode::kCount;
        req.count = n;
        req.local_tasks = tasks;
        req.node = "node1";
        const int per = n == 0 ? gpus / tasks : n;
        const bool fits = per >= 1 && per * tasks <= gpus;
        std::set<int> seen;
        for (int r = 0; r < tasks; ++r) {
          req.local_rank = r;
          auto got = select_gpus(all_gpus(gpus), req);
          const std::string why = got.status().message();
          ck_assert_msg(got.ok() == fits, "tasks=%d gpus=%d n=%d rank=%d: %s", tasks, gpus, n, r,
                        why.c_str());
          if (!fits) {
            const std::string m = got.status().message();
            ck_assert_msg(m.find("--dl-gpus=") == 0 && m.find("node1") != std::string::npos &&
                              m.find("--gres=gpu:") != std::string::npos,
                          "%s", m.c_str());
            continue;
          }
          ck_assert_int_eq(static_cast<int>(got->size()), per);
          for (int i = 0; i < per; ++i) ck_assert_int_eq((*got)[i], r * per + i);
          seen.insert(got->begin(), got->end());
        }
        if (fits) ck_assert_int_eq(static_cast<int>(seen.size()), per * tasks);
      }
}
END_TEST

START_TEST(none_gives_nothing) {
  GpuRequest req;
  req.mode = GpuRequest::Mode::kNone;
  auto got = select_gpus(all_gpus(4), req);
  ck_assert(got.ok() && got->empty());
}
END_TEST

START_TEST(step_gpus_follow_slurm_order) {
  std::string root = make_fake_node(8);
  auto node = node_gpus(root);
  ck_assert_int_eq(static_cast<int>(node.size()), 8);
  EXPECT_STR(node[3].uuid, "GPU-fake-3");
  EXPECT_STR(node[3].pci_bus_id, fake_bus_id(3).c_str());
  // Non-contiguous, then reordered: local rank r takes the r-th group in Slurm's order.
  auto step = step_gpus(node, std::string("1,3,6"), std::string("0"));
  ck_assert(step.ok());
  ck_assert(step->minors == std::vector<int>({1, 3, 6}));
  EXPECT_STR(step->source, "SLURM_STEP_GPUS=1,3,6");
  step = step_gpus(node, std::string("6,1,3,5"), std::nullopt);
  ck_assert(step.ok());
  GpuRequest req{GpuRequest::Mode::kCount, 2, 1, 2, "node1"};
  auto got = select_gpus(*step, req);
  ck_assert(got.ok() && *got == std::vector<int>({3, 5}));
  req = {GpuRequest::Mode::kAuto, 0, 2, 3, "node1"};
  got = select_gpus(*step, req);
  ck_assert(got.ok() && *got == std::vector<int>({3}));
}
END_TEST

START_TEST(step_gpus_from_cuda_visible_devices_and_uuids) {
  std::string root = make_fake_node(4);
  auto node = node_gpus(root);
  auto step = step_gpus(node, std::nullopt, std::string("GPU-fake-2,0"));
  ck_assert(step.ok());
  ck_assert(step->minors == std::vector<int>({2, 0}));
  step = step_gpus(node, std::string(""), std::nullopt);  // no GRES: every GPU of the node
  ck_assert(step.ok() && step->minors == std::vector<int>({0, 1, 2, 3}));
  ck_assert(step->source.find("no GRES") != std::string::npos);
  step = step_gpus(node, std::nullopt, std::string("NoDevFiles"));
  ck_assert(step.ok() && step->minors.empty());
}
END_TEST

START_TEST(step_gpus_reject_unknown_gpus) {
  auto node = node_gpus(make_fake_node(4));
  auto step = step_gpus(node, std::string("0,9"), std::nullopt);
  ck_assert(!step.ok());
  ck_assert_msg(step.status().message().find("SLURM_STEP_GPUS=0,9 names GPU 9") == 0 &&
                    step.status().message().find("0-3") != std::string::npos,
                "%s", step.status().message().c_str());
  ck_assert(!step_gpus(node, std::nullopt, std::string("GPU-nope")).ok());
  ck_assert(!step_gpus(node, std::string("1,1"), std::nullopt).ok());
}
END_TEST

START_TEST(too_few_gpus_says_how_many) {
  GpuRequest req{GpuRequest::Mode::kCount, 2, 0, 4, "node3"};
  auto got = select_gpus(all_gpus(6), req);
  ck_assert(!got.ok());
  EXPECT_STR(got.status().message().substr(0, 56), "--dl-gpus=2: 4 tasks need 8 GPUs, but there are 6 in the");
  req = {GpuRequest::Mode::kAuto, 0, 0, 8, "node3"};
  got = select_gpus(all_gpus(4), req);
  ck_assert(!got.ok());
  ck_assert_msg(got.status().message().find("--dl-gpus=auto: 8 tasks cannot share the 4 GPUs") == 0,
                "%s", got.status().message().c_str());
}
END_TEST

static bool has_dest(const GpuTaskPlan& p, const std::string& d) {
  return std::any_of(p.binds.begin(), p.binds.end(),
                     [&](const PlannedBind& b) { return b.bind.destination == d; });
}

static std::string env_of(const GpuTaskPlan& p, const std::string& name) {
  for (const auto& e : p.env)
    if (e.name == name) return e.value;
  return "<unset>";
}

START_TEST(task_plan_binds_only_its_gpus) {
  std::string root = make_fake_node(8);
  auto node = node_gpus(root);
  auto plan = plan_gpu_task(root, node, {5, 2}, "/empty");
  for (int i = 0; i < 8; ++i)
    ck_assert_msg(has_dest(plan, "/dev/nvidia" + std::to_string(i)) == (i == 2 || i == 5), "%d", i);
  for (const char* d : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-caps"})
    ck_assert_msg(has_dest(plan, d), "%s", d);
  ck_assert(!has_dest(plan, "/dev/nvidia-modeset"));  // not on this node
  for (const auto& b : plan.binds) {
    if (b.bind.destination.rfind("/dev/", 0) == 0) {
      ck_assert(b.bind.allow_devices);
      EXPECT_STR(b.bind.source, (root + b.bind.destination).c_str());
    } else {  // another GPU's /proc entry, hidden
      EXPECT_STR(b.bind.source, "/empty");
      ck_assert(b.bind.destination.find(fake_bus_id(2)) == std::string::npos);
    }
  }
  ck_assert(has_dest(plan, "/proc/driver/nvidia/gpus/" + fake_bus_id(0)));
  EXPECT_STR(env_of(plan, "CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_STR(env_of(plan, "NVIDIA_VISIBLE_DEVICES"), "GPU-fake-2,GPU-fake-5");
  EXPECT_STR(format_cpulist(plan.cpus), "4-11");  // GPU 2: 4-7, GPU 5: 8-11
  ck_assert(plan.cpus_why.find("NUMA node 1") != std::string::npos);
}
END_TEST

START_TEST(task_plan_without_sysfs_keeps_affinity) {
  std::string root = make_scratch();
  write_file(root + "/dev/nvidia0", "");
  auto node = node_gpus(root);
  auto plan = plan_gpu_task(root, node, {0}, "");
  ck_assert(plan.cpus.empty());
  EXPECT_STR(env_of(plan, "NVIDIA_VISIBLE_DEVICES"), "0");
  ck_assert_int_eq(static_cast<int>(plan.binds.size()), 1);
  ck_assert(plan_gpu_task(root, node, {}, "").binds.empty());
}
END_TEST

START_TEST(driver_libraries_come_from_the_ld_cache) {
  std::string root = make_scratch();
  write_file(root + "/usr/lib/x86_64-linux-gnu/libcuda.so.550.1", "");
  write_file(root + "/usr/bin/nvidia-smi", "");
  LdCache cache({{"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.1"},
                 {"libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so"},
                 {"libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"},
                 {"libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1"}});
  auto binds = driver_binds(root, cache, kCapCompute | kCapUtility, "/usr/lib/x86_64-linux-gnu");
  std::set<std::string> dests;
  for (const auto& b : binds) {
    ck_assert(b.bind.read_only);
    dests.insert(b.bind.destination);
  }
  ck_assert(dests.count("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  ck_assert(dests.count("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
  ck_assert(!dests.count("/usr/lib/x86_64-linux-gnu/libcuda.so"));  // the dev symlink: not a soname
  ck_assert(!dests.count("/usr/lib/x86_64-linux-gnu/libz.so.1"));
  ck_assert(dests.count("/usr/bin/nvidia-smi"));
  // utility alone: NVML and nvidia-smi, not CUDA.
  dests.clear();
  for (const auto& b : driver_binds(root, cache, kCapUtility, "/usr/lib64")) dests.insert(b.bind.destination);
  ck_assert(dests.count("/usr/lib64/libnvidia-ml.so.1") && dests.count("/usr/bin/nvidia-smi"));
  ck_assert(!dests.count("/usr/lib64/libcuda.so.1"));
  // A node that keeps the driver under /usr/local/nvidia has nvidia-smi in its bin/.
  std::string nv = make_scratch();
  write_file(nv + "/usr/local/nvidia/bin/nvidia-smi", "");
  dests.clear();
  for (const auto& b : driver_binds(nv, cache, kCapUtility, "/usr/lib64")) {
    dests.insert(b.bind.destination);
    if (b.bind.destination == "/usr/bin/nvidia-smi")
      EXPECT_STR(b.bind.source, nv + "/usr/local/nvidia/bin/nvidia-smi");
  }
  ck_assert(dests.count("/usr/bin/nvidia-smi"));
}
END_TEST

START_TEST(cpulists_parse_and_format) {
  auto c = parse_cpulist("0-3,8,10-11\n");
  ck_assert(c.ok());
  EXPECT_STR(format_cpulist(*c), "0-3,8,10-11");
  ck_assert(parse_cpulist("")->empty());
  ck_assert(!parse_cpulist("3-1").ok());
  ck_assert(!parse_cpulist("a").ok());
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("dl_gpu");
  TCase* tc = tcase_create("gpu");
  tcase_add_test(tc, selection_matrix);
  tcase_add_test(tc, none_gives_nothing);
  tcase_add_test(tc, step_gpus_follow_slurm_order);
  tcase_add_test(tc, step_gpus_from_cuda_visible_devices_and_uuids);
  tcase_add_test(tc, step_gpus_reject_unknown_gpus);
  tcase_add_test(tc, too_few_gpus_says_how_many);
  tcase_add_test(tc, task_plan_binds_only_its_gpus);
  tcase_add_test(tc, task_plan_without_sysfs_keeps_affinity);
  tcase_add_test(tc, driver_libraries_come_from_the_ld_cache);
  tcase_add_test(tc, cpulists_parse_and_format);
  suite_add_tcase(s, tc);
  return s;
}
