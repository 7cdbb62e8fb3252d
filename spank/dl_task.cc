// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Deep-learning wiring of a step (see dl_hooks.h): in user_init, the node-wide part (host library
// injection with its checks; the GPU exposure the container's NVIDIA_* variables or --dl-gpus ask
// for, with the driver's libraries); in task_init, the task's part (its GPUs, its DL environment,
// CPU affinity) and --dl-explain. The decisions are made by launcher/ (step/step_gpus.h, dl/); this
// file only reads Slurm's view of the task and applies them.
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <string>
#include <vector>

#include "dl/dl_env.h"
#include "dl/gpu.h"
#include "dl/host_libs.h"
#include "step/step_gpus.h"
#include "dl_explain.h"
#include "dl_hooks.h"
#include "log.h"
#include "remote_env.h"

namespace slipway::spank {
namespace {

using launcher::EnvSetting;
using launcher::PlannedBind;
using launcher::Status;

// What user_init decided for the node. The tasks are forked from this slurmstepd after user_init,
// so they inherit it.
struct DlNode {
  launcher::InjectionPlan injection;
  launcher::GpuNodePlan gpu;
  std::string failed;  // why the node-wide part failed; kept for --dl-explain to show
};

DlNode& dl_node() {
  static DlNode n;
  return n;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

Status plan_host_libs(const PluginState& st, const launcher::LdCache& cache,
                      const std::string& rootfs, DlNode& n) {
  launcher::InjectRequest req{st.options.dl_host_libs, "/", rootfs, st.config.mpi_abi};
  auto plan = launcher::plan_injection(st.config.host_lib_sets, req, cache);
  SLIPWAY_TRY(plan);
  n.injection = std::move(*plan);
  auto& inj = n.injection;
  if (inj.errors.empty()) return Status();
  // One line: the first failed check (checks run from the library the set names outwards, so
  // the first one is the cause: an soname major that differs makes every later one moot).
  if (!st.config.host_libs_warn_only) {
    const size_t more = inj.errors.size() - 1;
    return Status::error(inj.errors.front() + (more ? " (and " + std::to_string(more) +
                                                          " more failed checks)"
                                                    : ""),
                         EINVAL);
  }
  inj.warnings.insert(inj.warnings.end(), inj.errors.begin(), inj.errors.end());
  inj.errors.clear();
  return Status();
}

// The names of the job's environment variables (for NVIDIA_REQUIRE_*).
std::vector<std::string> job_env_names(spank_t sp) {
  std::vector<std::string> names;
  char** env = nullptr;
  if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env) return names;
  for (char** e = env; *e; ++e) names.emplace_back(*e, strcspn(*e, "="));
  return names;
}

Status prepare_node(spank_t sp, const PluginState& st, launcher::LaunchSpec& spec, DlNode& n) {
  launcher::StepGpuInput in{.site_default = st.config.dl_gpus,
                            .job_env = [sp](const std::string& name) {
                              return job_getenv(sp, name.c_str());
                            },
                            .job_env_names = job_env_names(sp),
                            .node = node_name()};
  auto gpu = launcher::plan_step_gpus(*st.step, st.options, in);
  SLIPWAY_TRY(gpu);
  n.gpu = std::move(*gpu);
  for (const auto& b : n.gpu.binds) spec.binds.push_back(b.bind);
  if (st.options.dl_host_libs.empty()) return Status();
  auto cache = launcher::LdCache::load("/etc/ld.so.cache");
  SLIPWAY_TRY(cache);
  SLIPWAY_TRY(plan_host_libs(st, *cache, spec.rootfs, n));
  for (const auto& b : n.injection.binds) spec.binds.push_back(b.bind);
  return Status();
}

template <class T>
T item(spank_t sp, spank_item_t what, T fallback) {
  T v{};
  return spank_get_item(sp, what, &v) == ESPANK_SUCCESS ? v : fallback;
}

launcher::TaskPlacement placement(spank_t sp) {
  launcher::TaskPlacement t;
  t.job_id = item<uint32_t>(sp, S_JOB_ID, 0);
  t.step_id = item<uint32_t>(sp, S_JOB_STEPID, 0);
  t.rank = static_cast<int>(item<uint32_t>(sp, S_TASK_GLOBAL_ID, 0));
  t.local_rank = item<int>(sp, S_TASK_ID, 0);
  t.world_size = static_cast<int>(item<uint32_t>(sp, S_JOB_TOTAL_TASK_COUNT, 1));
  t.local_world_size = static_cast<int>(item<uint32_t>(sp, S_JOB_LOCAL_TASK_COUNT, 1));
  t.node_rank = static_cast<int>(item<uint32_t>(sp, S_JOB_NODEID, 0));
  t.nodelist = job_getenv(sp, "SLURM_STEP_NODELIST")
                   .value_or(job_getenv(sp, "SLURM_JOB_NODELIST").value_or(""));
  return t;
}

// An empty directory of the user's, bound over other tasks' GPU entries in /proc.
std::string empty_dir(const PluginState& st) {
  if (st.cache_dir.empty()) return "";
  std::string d = st.cache_dir + "/empty";
  if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) return "";
  return d;
}

Status plan_gpus(spank_t sp, const PluginState& st, const launcher::TaskPlacement& t,
                 TaskPlan& plan) {
  launcher::GpuTaskInput in{.slurm_step_gpus = job_getenv(sp, "SLURM_STEP_GPUS"),
                            .cuda_visible_devices = job_getenv(sp, "CUDA_VISIBLE_DEVICES"),
                            .local_rank = t.local_rank, .local_tasks = t.local_world_size,
                            .node = node_name(), .empty_dir = empty_dir(st)};
  auto gpu = launcher::plan_gpu_task_exposure(dl_node().gpu, in, plan.gpu_source);
  SLIPWAY_TRY(gpu);
  plan.gpu = std::move(*gpu);
  return Status();
}

// Host libraries come first on the library path (see host_libs.h for why). The driver's need no
// entry: they are in a directory the image's loader searches anyway (dl/gpu_exposure.h).
void plan_library_path(spank_t sp, TaskPlan& plan) {
  const DlNode& n = dl_node();
  std::vector<std::string> dirs;
  if (!n.injection.libs.empty()) dirs.push_back(launcher::kHostLibDir);
  if (dirs.empty()) return;
  std::string path = join(dirs, ":");
  if (auto old = job_getenv(sp, "LD_LIBRARY_PATH"); old && !old->empty()) path += ":" + *old;
  plan.env.push_back({"LD_LIBRARY_PATH", path,
                      "injected host libraries are found before the image's (ld.so(8) search order)"});
}

Status apply(spank_t sp, const TaskPlan& plan, launcher::TaskView& view) {
  for (const auto& b : plan.gpu.binds) view.binds.push_back(b.bind);
  for (const auto* list : {&plan.env, &plan.gpu.env})
    for (const auto& e : *list)
      if (spank_setenv(sp, e.name.c_str(), e.value.c_str(), e.overwrite ? 1 : 0) != ESPANK_SUCCESS &&
          e.overwrite)
        return Status::error("cannot set " + e.name + " for the task", EINVAL);
  launcher::narrow_affinity(plan.gpu.cpus);
  return Status();
}

}  // namespace

Status prepare_dl_node(spank_t sp, const PluginState& st, launcher::LaunchSpec& spec) {
  DlNode& n = dl_node();
  Status s = prepare_node(sp, st, spec, n);
  if (s.ok() || !st.options.dl_explain) return s;
  n.failed = s.message();  // --dl-explain shows it from task_init, where the user sees it
  return Status();
}

Status prepare_dl_task(spank_t sp, const PluginState& st, launcher::TaskView& view) {
  const DlNode& n = dl_node();
  const launcher::TaskPlacement t = placement(sp);
  TaskPlan plan;
  plan.placement = t;
  plan.node = node_name();
  auto env = launcher::dl_environment(t, st.config.master_ports);
  SLIPWAY_TRY(env);
  plan.env = std::move(*env);
  Status gpus = plan_gpus(sp, st, t, plan);
  plan_library_path(sp, plan);
  if (st.options.dl_explain) {
    explain_and_exit(plan, n.injection, n.gpu, n.failed.empty() ? gpus.message() : n.failed);
  }
  SLIPWAY_TRY(gpus);
  for (const auto& w : n.injection.warnings)
    if (t.local_rank == 0) log_user("warning: " + w);
  return apply(sp, plan, view);
}

}  // namespace slipway::spank
