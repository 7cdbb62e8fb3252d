// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests of the NVIDIA_* semantics (dl/nvidia_env.h) and of GPU exposure (dl/gpu_exposure.h)
// against fake node and image trees: which GPUs, libraries and tools a container gets for each
// value of NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES, the NVIDIA_REQUIRE_* checks
// against a driver version, CUDA forward compatibility, and the one-line errors.
#include <map>
#include <set>
#include <string>

#include "dl/gpu_exposure.h"
#include "dl/nvidia_env.h"
#include "dl_test_util.h"

#include "check_main.h"  // last: check.h defines a fail() macro

using namespace slipway::launcher;

namespace {

using Vars = std::map<std::string, std::string>;

NvidiaEnvSource source(const Vars& job, const Vars& image) {
  NvidiaEnvSource s;
  s.job = [job](const std::string& n) -> std::optional<std::string> {
    auto it = job.find(n);
    return it == job.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  s.image = [image](const std::string& n) -> std::optional<std::string> {
    auto it = image.find(n);
    return it == image.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  for (const auto* m : {&job, &image})
    for (const auto& [k, v] : *m) s.names.push_back(k);
  return s;
}

DriverInfo driver(const std::string& version) {
  std::string root = make_scratch();
  write_file(root + "/proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + version +
                 "  Sun Jul 27 2025\nGCC version:  gcc version 13.3.0\n");
  return host_driver(root, LdCache());
}

// A node with GPUS fake GPUs and a driver: libcuda/libnvidia-ml files, nvidia-smi, the version file.
struct FakeNode {
  std::string root;
  LdCache cache;
};
FakeNode fake_driver_node(int gpus, const std::string& version = "535.104.05") {
  FakeNode n{make_fake_node(gpus), {}};
  const std::string lib = "/usr/lib/x86_64-linux-gnu/";
  for (const char* f : {"libcuda.so.", "libnvidia-ml.so.", "libnvidia-ptxjitcompiler.so."})
    write_file(n.root + lib + f + version, "");
  write_file(n.root + "/usr/bin/nvidia-smi", "");
  write_file(n.root + "/usr/bin/nvidia-cuda-mps-control", "");
  write_file(n.root + "/proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  " + version + "  Release\n");
  n.cache = LdCache({{"libcuda.so.1", lib + "libcuda.so." + version},
                     {"libnvidia-ml.so.1", lib + "libnvidia-ml.so." + version},
                     {"libnvidia-ptxjitcompiler.so.1", lib + "libnvidia-ptxjitcompiler.so." + version}});
  return n;
}

GpuNodeInput node_input(const FakeNode& n, const Vars& job, const Vars& image) {
  GpuNodeInput in;
  in.root = n.root;
  in.host_cache = &n.cache;
  in.image = "nvcr.io#nvidia/pytorch:24.05-py3";
  in.node = "node1";
  in.env = source(job, image);
  return in;
}

std::set<std::string> destinations(const std::vector<PlannedBind>& binds) {
  std::set<std::string> out;
  for (const auto& b : binds) out.insert(b.bind.destination);
  return out;
}

std::string env_of(const GpuTaskPlan& p, const std::string& name) {
  for (const auto& e : p.env)
    if (e.name == name) return e.value;
  return "<unset>";
}

GpuTaskInput task_input(const FakeNode& n, std::optional<std::string> step_gpus = std::nullopt) {
  GpuTaskInput t;
  t.root = n.root;
  t.slurm_step_gpus = std::move(step_gpus);
  t.node = "node1";
  return t;
}

}  // namespace

START_TEST(visible_devices_values) {
  using D = NvidiaRequest::Devices;
  auto r = parse_nvidia_env(source({}, {}));
  ck_assert(r.ok() && r->devices == D::kVoid);
  for (const char* v : {"", "void"}) {
    r = parse_nvidia_env(source({}, {{"NVIDIA_VISIBLE_DEVICES", v}}));
    ck_assert(r.ok() && r->devices == D::kVoid);
  }
  r = parse_nvidia_env(source({}, {{"NVIDIA_VISIBLE_DEVICES", "none"}}));
  ck_assert(r.ok() && r->devices == D::kNone);
  r = parse_nvidia_env(source({}, {{"NVIDIA_VISIBLE_DEVICES", "all"}}));
  ck_assert(r.ok() && r->devices == D::kAll);
  EXPECT_STR(r->devices_from, "the image's Env");
  // The job's value wins over the image's (enroot's hook keeps what the job set).
  r = parse_nvidia_env(source({{"NVIDIA_VISIBLE_DEVICES", "1,GPU-fake-3"}},
                              {{"NVIDIA_VISIBLE_DEVICES", "all"}}));
  ck_assert(r.ok() && r->devices == D::kList);
  ck_assert(r->list == std::vector<std::string>({"1", "GPU-fake-3"}));
  EXPECT_STR(r->devices_from, "the job's environment");
  r = parse_nvidia_env(source({{"NVIDIA_VISIBLE_DEVICES", "void"}}, {{"NVIDIA_VISIBLE_DEVICES", "all"}}));
  ck_assert(r.ok() && r->devices == D::kVoid);
}
END_TEST

START_TEST(driver_capabilities) {
  auto c = parse_capabilities("");
  ck_assert(c.ok() && *c == kCapUtility);  // the default, as enroot and libnvidia-container
  c = parse_capabilities("compute,utility");
  ck_assert(c.ok() && *c == (kCapCompute | kCapUtility));
  c = parse_capabilities("video,all");
  ck_assert(c.ok() && *c == kCapAll);
  EXPECT_STR(format_capabilities(kCapAll), "compute,utility,video,graphics,display,compat32");
  c = parse_capabilities("compute,cuda");
  ck_assert(!c.ok());
  EXPECT_STR(c.status().message(),
             "NVIDIA_DRIVER_CAPABILITIES='compute,cuda' names unknown capability 'cuda'; use "
             "compute, utility, video, graphics, display, compat32 or all");
}
END_TEST

START_TEST(driver_version_and_cuda) {
  auto d = driver("535.104.05");
  EXPECT_STR(d.version, "535.104.05");
  EXPECT_STR(d.cuda(), "12.2");
  EXPECT_STR(driver("550.54.15").cuda(), "12.4");
  EXPECT_STR(driver("550.54.13").cuda(), "12.3");
  EXPECT_STR(driver("575.57.08").cuda(), "12.9");
  EXPECT_STR(driver("580.65.06").cuda(), "13.0");
  EXPECT_STR(driver("595.10").cuda(), "newer than 13.0");
  // Without /proc/driver/nvidia/version: the file name libcuda.so.1 points to.
  FakeNode n = fake_driver_node(1, "470.223.02");
  unlink((n.root + "/proc/driver/nvidia/version").c_str());
  d = host_driver(n.root, n.cache);
  EXPECT_STR(d.version, "470.223.02");
  EXPECT_STR(d.cuda(), "11.4");
}
END_TEST

START_TEST(requirements_or_and) {
  const std::string ngc = "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=535,driver<536";
  auto req = parse_nvidia_env(source({}, {{"NVIDIA_REQUIRE_CUDA", ngc}}));
  ck_assert(req.ok() && req->requirements.size() == 1);
  ck_assert(check_requirements(*req, driver("550.54.15"), "img", "node1").ok());  // cuda>=12.4
  ck_assert(check_requirements(*req, driver("535.104.05"), "img", "node1").ok());  // 535 branch
  ck_assert(check_requirements(*req, driver("470.223.02"), "img", "node1").ok());
  Status s = check_requirements(*req, driver("525.147.05"), "img", "node1");
  ck_assert(!s.ok());
  EXPECT_STR(s.message(),
             "image 'img' requires NVIDIA_REQUIRE_CUDA=" + ngc + ", but node node1's NVIDIA driver "
             "is 525.147.05 (CUDA 12.0); use an image built for this driver's CUDA, run on nodes "
             "with a newer driver, or set NVIDIA_DISABLE_REQUIRE=1 if the image carries CUDA "
             "forward-compatibility libraries");
  // Several variables are ANDed.
  req = parse_nvidia_env(source({{"NVIDIA_REQUIRE_DRIVER", "driver>=550"}},
                                {{"NVIDIA_REQUIRE_CUDA", "cuda>=12.0"}}));
  ck_assert(req.ok() && req->requirements.size() == 2);
  ck_assert(!check_requirements(*req, driver("535.104.05"), "img", "n").ok());
  ck_assert(check_requirements(*req, driver("550.54.15"), "img", "n").ok());
  // NVIDIA_DISABLE_REQUIRE switches them off; "0" does not.
  req = parse_nvidia_env(source({{"NVIDIA_DISABLE_REQUIRE", "1"}}, {{"NVIDIA_REQUIRE_CUDA", "cuda>=13.0"}}));
  ck_assert(req.ok() && req->requirements.empty());
  req = parse_nvidia_env(source({{"NVIDIA_DISABLE_REQUIRE", "0"}}, {{"NVIDIA_REQUIRE_CUDA", "cuda>=13.0"}}));
  ck_assert(req.ok() && req->requirements.size() == 1);
  // A malformed constraint names itself.
  req = parse_nvidia_env(source({}, {{"NVIDIA_REQUIRE_X", "cuda~12"}}));
  s = check_requirements(*req, driver("535.104.05"), "img", "n");
  ck_assert(!s.ok() && s.message().find("'cuda~12'") != std::string::npos);
}
END_TEST

START_TEST(void_exposes_nothing_all_exposes_the_step) {
  FakeNode n = fake_driver_node(4);
  auto plan = plan_gpu_node(node_input(n, {}, {}));
  ck_assert(plan.ok() && !plan->expose && plan->binds.empty());
  plan = plan_gpu_node(node_input(n, {}, {{"NVIDIA_VISIBLE_DEVICES", "all"},
                                          {"NVIDIA_DRIVER_CAPABILITIES", "compute,utility"}}));
  ck_assert(plan.ok() && plan->expose && !plan->per_rank);
  EXPECT_STR(plan->lib_dir, "/usr/lib/x86_64-linux-gnu");
  auto dests = destinations(plan->binds);
  ck_assert(dests.count("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  ck_assert(dests.count("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
  ck_assert(dests.count("/usr/bin/nvidia-smi") && dests.count("/usr/bin/nvidia-cuda-mps-control"));
  ck_assert(!dests.count("/run/nvidia-persistenced/socket"));
  write_file(n.root + "/run/nvidia-persistenced/socket", "");  // where the daemon runs
  plan = plan_gpu_node(node_input(n, {}, {{"NVIDIA_VISIBLE_DEVICES", "all"}}));
  ck_assert(destinations(plan->binds).count("/run/nvidia-persistenced/socket"));
  plan = plan_gpu_node(node_input(n, {}, {{"NVIDIA_VISIBLE_DEVICES", "all"},
                                          {"NVIDIA_DRIVER_CAPABILITIES", "compute,utility"}}));
  std::string source;
  auto task = plan_gpu_task_exposure(*plan, task_input(n, "1,3"), source);
  ck_assert(task.ok());
  ck_assert(task->minors == std::vector<int>({1, 3}));
  EXPECT_STR(env_of(*task, "CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_STR(source, "SLURM_STEP_GPUS=1,3");
  auto devs = destinations(task->binds);
  ck_assert(devs.count("/dev/nvidia1") && devs.count("/dev/nvidia3") && !devs.count("/dev/nvidia0"));
  ck_assert(devs.count("/dev/nvidiactl") && devs.count("/dev/nvidia-uvm"));
  // The default capability is utility: NVML and nvidia-smi, no libcuda.
  plan = plan_gpu_node(node_input(n, {{"NVIDIA_VISIBLE_DEVICES", "all"}}, {}));
  dests = destinations(plan->binds);
  ck_assert(dests.count("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
  ck_assert(!dests.count("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
}
END_TEST

START_TEST(lists_none_and_mig) {
  FakeNode n = fake_driver_node(4);
  std::string source;
  auto plan = plan_gpu_node(node_input(n, {{"NVIDIA_VISIBLE_DEVICES", "GPU-fake-2,0"}}, {}));
  ck_assert(plan.ok());
  auto task = plan_gpu_task_exposure(*plan, task_input(n), source);
  ck_assert(task.ok() && task->minors == std::vector<int>({2, 0}));
  // A GPU the step does not hold.
  task = plan_gpu_task_exposure(*plan, task_input(n, "1,2"), source);
  ck_assert(!task.ok());
  EXPECT_STR(task.status().message(),
             "NVIDIA_VISIBLE_DEVICES=GPU-fake-2,0 (the job's environment) names GPU 0, which this "
             "step does not hold on node1 (SLURM_STEP_GPUS=1,2); name one of those, or 'all'");
  // none: the driver and its control devices, no GPU.
  plan = plan_gpu_node(node_input(n, {}, {{"NVIDIA_VISIBLE_DEVICES", "none"}}));
  ck_assert(plan.ok() && plan->expose && !plan->binds.empty());
  task = plan_gpu_task_exposure(*plan, task_input(n), source);
  ck_assert(task.ok() && task->minors.empty());
  auto devs = destinations(task->binds);
  ck_assert(devs.count("/dev/nvidiactl") && !devs.count("/dev/nvidia0"));
  // MIG names: the step's GPUs go in, CUDA picks the instances.
  plan = plan_gpu_node(node_input(n, {{"NVIDIA_VISIBLE_DEVICES", "MIG-GPU-fake-1/1/0"}}, {}));
  task = plan_gpu_task_exposure(*plan, task_input(n, "1"), source);
  ck_assert(task.ok() && task->minors == std::vector<int>({1}));
  EXPECT_STR(env_of(*task, "CUDA_VISIBLE_DEVICES"), "MIG-GPU-fake-1/1/0");
}
END_TEST

START_TEST(dl_gpus_splits_and_none_turns_off) {
  FakeNode n = fake_driver_node(4);
  auto in = node_input(n, {}, {{"NVIDIA_VISIBLE_DEVICES", "all"}});
  in.option = {GpuChoice::Mode::kNone, 0};
  auto plan = plan_gpu_node(in);
  ck_assert(plan.ok() && !plan->expose && plan->binds.empty());
  // --dl-gpus=2 without any NVIDIA_* variable: compute and utility, split by local rank.
  in = node_input(n, {}, {});
  in.option = {GpuChoice::Mode::kCount, 2};
  plan = plan_gpu_node(in);
  ck_assert(plan.ok() && plan->expose && plan->per_rank);
  ck_assert(destinations(plan->binds).count("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  auto t = task_input(n);
  t.local_rank = 1, t.local_tasks = 2;
  std::string source;
  auto task = plan_gpu_task_exposure(*plan, t, source);
  ck_assert(task.ok() && task->minors == std::vector<int>({2, 3}));
  t.local_tasks = 3;
  t.local_rank = 0;
  ck_assert(!plan_gpu_task_exposure(*plan, t, source).ok());
}
END_TEST

START_TEST(missing_uvm_and_driver_libraries_say_the_fix) {
  FakeNode n = fake_driver_node(2);
  unlink((n.root + "/dev/nvidia-uvm").c_str());
  auto plan = plan_gpu_node(node_input(n, {{"NVIDIA_VISIBLE_DEVICES", "all"},
                                           {"NVIDIA_DRIVER_CAPABILITIES", "compute,utility"}}, {}));
  ck_assert(plan.ok());
  std::string source;
  auto task = plan_gpu_task_exposure(*plan, task_input(n), source);
  ck_assert(!task.ok());
  EXPECT_STR(task.status().message(),
             "node node1 has no /dev/nvidia-uvm, without which CUDA cannot start: an admin loads it "
             "with 'nvidia-modprobe -u -c=0' (or 'modprobe nvidia-uvm' and creates the device), or "
             "run without GPUs (--dl-gpus=none)");
  LdCache empty;
  auto in = node_input(n, {{"NVIDIA_VISIBLE_DEVICES", "all"}, {"NVIDIA_DRIVER_CAPABILITIES", "compute"}}, {});
  in.host_cache = &empty;
  plan = plan_gpu_node(in);
  ck_assert(!plan.ok());
  EXPECT_STR(plan.status().message(),
             "node node1 has NVIDIA GPUs but no libcuda.so.1 in its ld.so cache: install the NVIDIA "
             "driver's user-space libraries and run ldconfig, or run without GPUs (--dl-gpus=none)");
  // A CPU node (no GPU, no driver) runs a CUDA image without GPUs.
  FakeNode cpu{make_scratch(), {}};
  plan = plan_gpu_node(node_input(cpu, {}, {{"NVIDIA_VISIBLE_DEVICES", "all"}}));
  ck_assert(plan.ok() && !plan->expose);
}
END_TEST

START_TEST(forward_compatibility_replaces_an_older_driver) {
  FakeNode n = fake_driver_node(1, "535.104.05");
  const std::string image = make_scratch();
  make_dirs(image + "/usr/lib/x86_64-linux-gnu");
  write_file(image + "/usr/local/cuda-12.4/compat/libcuda.so.550.54.15", "");
  symlink("libcuda.so.550.54.15", (image + "/usr/local/cuda-12.4/compat/libcuda.so.1").c_str());
  symlink("cuda-12.4", (image + "/usr/local/cuda").c_str());
  auto in = node_input(n, {}, {{"NVIDIA_VISIBLE_DEVICES", "all"},
                               {"NVIDIA_DRIVER_CAPABILITIES", "compute,utility"},
                               {"NVIDIA_REQUIRE_CUDA", "cuda>=12.4 brand=tesla,driver>=535,driver<536"}});
  in.image_root = image;
  auto plan = plan_gpu_node(in);
  ck_assert(plan.ok());
  int libcuda = 0;
  for (const auto& b : plan->binds)
    if (b.bind.destination == "/usr/lib/x86_64-linux-gnu/libcuda.so.1") {
      ++libcuda;
      EXPECT_STR(b.bind.source, image + "/usr/local/cuda-12.4/compat/libcuda.so.1");
    }
  ck_assert_int_eq(libcuda, 1);
  ck_assert(destinations(plan->binds).count("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
  // A node driver newer than the compat libraries keeps its own.
  FakeNode newer = fake_driver_node(1, "560.35.03");
  in.root = newer.root;
  in.host_cache = &newer.cache;
  plan = plan_gpu_node(in);
  for (const auto& b : plan->binds)
    if (b.bind.destination == "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
      ck_assert(b.bind.source.find(newer.root) == 0);
}
END_TEST

START_TEST(library_dir_follows_the_image) {
  std::string image = make_scratch();
  EXPECT_STR(image_lib_dir(""), "/usr/lib/x86_64-linux-gnu");
  make_dirs(image + "/usr/lib");
  EXPECT_STR(image_lib_dir(image), "/usr/lib");
  make_dirs(image + "/usr/lib64");
  EXPECT_STR(image_lib_dir(image), "/usr/lib64");
  make_dirs(image + "/usr/lib/x86_64-linux-gnu");
  EXPECT_STR(image_lib_dir(image), "/usr/lib/x86_64-linux-gnu");
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("dl_nvidia_env");
  TCase* tc = tcase_create("nvidia");
  for (auto* t : {visible_devices_values, driver_capabilities, driver_version_and_cuda,
                  requirements_or_and, void_exposes_nothing_all_exposes_the_step, lists_none_and_mig,
                  dl_gpus_splits_and_none_turns_off, missing_uvm_and_driver_libraries_say_the_fix,
                  forward_compatibility_replaces_an_older_driver, library_dir_follows_the_image})
    tcase_add_test(tc, t);
  suite_add_tcase(s, tc);
  return s;
}
