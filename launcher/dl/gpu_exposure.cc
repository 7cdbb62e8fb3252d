// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// GPU exposure of a step's container, shared by the plugin and `slipway run` (see gpu_exposure.h).
#include "dl/gpu_exposure.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>

#include "common/unique_fd.h"

namespace slipway::launcher {
namespace {

#if defined(__aarch64__)
constexpr const char* kMultiarch = "aarch64-linux-gnu";
#else
constexpr const char* kMultiarch = "x86_64-linux-gnu";
#endif

bool exists(const std::string& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0;
}

bool is_dir_in(const std::string& root, const std::string& path) {
  struct stat st;
  return stat((root + path).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The driver's libraries that CUDA forward compatibility replaces (the cuda-compat package's files,
// NVIDIA's "CUDA Compatibility" guide, "Forward Compatibility").
constexpr const char* kCompatPrefixes[] = {"libcuda.so.", "libcudadebugger.so.",
                                           "libnvidia-nvvm.so.", "libnvidia-ptxjitcompiler.so.",
                                           "libnvidia-pkcs11.so.", "libnvidia-pkcs11-openssl3.so."};

// The image's /usr/local/cuda/compat, as a host path that stays inside IMAGE_ROOT (its symlinks,
// /usr/local/cuda -> cuda-12.4 among them, are the image's own), or "".
std::string compat_dir(const std::string& image_root) {
  char real[PATH_MAX], root_real[PATH_MAX];
  if (!realpath(image_root.c_str(), root_real)) return "";
  if (!realpath((image_root + "/usr/local/cuda/compat").c_str(), real)) return "";
  const std::string r = real, base = std::string(root_real) + "/";
  return r.rfind(base, 0) == 0 ? r : "";
}

// The libcuda.so.X.Y.Z of a compat directory: its driver version, or empty.
std::vector<int> compat_version(const std::string& dir) {
  std::vector<int> best;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("libcuda.so.", 0) != 0) continue;
      auto v = parse_version(n.substr(11));
      if (v.size() >= 2 && compare_versions(v, best) > 0) best = v;
    }
    closedir(d);
  }
  return best;
}

// When the image's forward-compatibility libraries are newer than the node's driver, they
// replace the driver's libraries of the same soname (as libnvidia-container mounts them over the
// driver's: NVIDIA/libnvidia-container src/cli/compat_mode.c).
void use_compat(const GpuNodeInput& in, GpuNodePlan& plan) {
  if (!(plan.request.capabilities & kCapCompute)) return;
  if (in.image_root.empty()) {
    plan.notes.push_back("a squashfs image's CUDA forward-compatibility libraries are not looked for");
    return;
  }
  const std::string dir = compat_dir(in.image_root);
  if (dir.empty()) return;
  const auto v = compat_version(dir);
  if (v.empty() || plan.driver.parts.empty() || compare_versions(v, plan.driver.parts) <= 0) return;
  char root_real[PATH_MAX];
  if (!realpath(in.image_root.c_str(), root_real)) return;
  const std::string inside = dir.substr(std::string(root_real).size());
  std::string ver;
  for (int x : v) ver += (ver.empty() ? "" : ".") + std::to_string(x);
  plan.notes.push_back("CUDA forward compatibility: the image's " + inside + " (driver " + ver +
                       ") replaces the node's driver " + plan.driver.version + " libraries");
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    for (const char* prefix : kCompatPrefixes) {
      // The soname links only (libcuda.so.1), as the loader asks for them.
      if (n.rfind(prefix, 0) != 0 || parse_version(n.substr(std::string(prefix).size())).size() != 1)
        continue;
      const std::string dest = plan.lib_dir + "/" + n;
      std::erase_if(plan.binds, [&](const PlannedBind& b) { return b.bind.destination == dest; });
      plan.binds.push_back({{.source = dir + "/" + n, .destination = dest, .read_only = true,
                             .recursive = false},
                            "CUDA forward-compatibility library of the image (" + inside + "/" + n +
                                "), newer than the node's driver " + plan.driver.version});
    }
  }
  closedir(d);
}

// A node with GPUs whose driver libraries are missing: one line with the fix.
Status check_driver_libs(const GpuNodeInput& in, const GpuNodePlan& plan) {
  for (auto [cap, soname] : {std::pair{kCapCompute, "libcuda.so.1"}, {kCapUtility, "libnvidia-ml.so.1"}})
    if ((plan.request.capabilities & cap) && !in.host_cache->find(soname))
      return Status::error(std::string("node ") + in.node + " has NVIDIA GPUs but no " + soname +
                               " in its ld.so cache: install the NVIDIA driver's user-space "
                               "libraries and run ldconfig, or run without GPUs (--dl-gpus=none)",
                           ENOENT);
  return Status();
}

// The image's own ld.so cache, read inside the image root (its symlinks resolve inside the
// image, never on the node); empty when it has none.
LdCache image_cache(const std::string& image_root) {
  UniqueFd root(open(image_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  struct open_how how = {};
  how.flags = O_RDONLY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(root.valid() ? static_cast<int>(syscall(SYS_openat2, root.get(), "etc/ld.so.cache",
                                                      &how, sizeof how))
                           : -1);
  std::string bytes;
  char buf[65536];
  for (ssize_t n; fd.valid() && bytes.size() < (64u << 20) && (n = read(fd.get(), buf, sizeof buf)) > 0;)
    bytes.append(buf, static_cast<size_t>(n));
  auto cache = LdCache::parse(bytes, image_root + "/etc/ld.so.cache");
  return cache.ok() ? std::move(*cache) : LdCache();
}

// An image whose own ld.so cache names a file for one of the driver's sonames (a registered
// stub or compat directory) would load that one first: the driver's library goes there too.
void cover_image_cache_entries(const std::string& image_root, GpuNodePlan& plan) {
  if (image_root.empty()) return;
  const LdCache cache = image_cache(image_root);
  if (cache.entries().empty()) return;
  std::vector<PlannedBind> extra;
  for (const auto& b : plan.binds) {
    const std::string& dest = b.bind.destination;
    if (dest.rfind(plan.lib_dir + "/", 0) != 0) continue;
    const LdCacheEntry* e = cache.find(dest.substr(plan.lib_dir.size() + 1));
    if (!e || e->path == dest || e->path.empty() || e->path[0] != '/') continue;
    PlannedBind over = b;
    over.bind.destination = e->path;
    over.why = b.why + ", also where the image's ld.so cache points (" + e->path + ")";
    extra.push_back(std::move(over));
  }
  plan.binds.insert(plan.binds.end(), extra.begin(), extra.end());
}

bool is_mig_name(const std::string& t) {
  return t.rfind("MIG-", 0) == 0 || t.find(':') != std::string::npos;
}

}  // namespace

void narrow_affinity(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t now, mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof now, &now) != 0) return;
  for (int c : cpus)
    if (c < CPU_SETSIZE && CPU_ISSET(c, &now)) CPU_SET(c, &mine);
  if (CPU_COUNT(&mine) > 0) sched_setaffinity(0, sizeof mine, &mine);
}

std::string image_lib_dir(const std::string& image_root) {
  const std::string multiarch = std::string("/usr/lib/") + kMultiarch;
  if (image_root.empty()) return multiarch;
  for (const std::string& d : {multiarch, std::string("/usr/lib64"), std::string("/usr/lib")})
    if (is_dir_in(image_root, d)) return d;
  return multiarch;
}

Result<GpuNodePlan> plan_gpu_node(const GpuNodeInput& in) {
  using Mode = GpuChoice::Mode;
  GpuNodePlan plan;
  if (in.option.mode == Mode::kNone) {
    plan.notes.push_back("--dl-gpus=none: no GPU and no driver");
    return plan;
  }
  auto req = parse_nvidia_env(in.env);
  if (!req.ok()) return req.status().context("image '" + in.image + "'");
  plan.request = std::move(*req);
  plan.option = in.option;
  plan.per_rank = in.option.mode == Mode::kCount || in.option.mode == Mode::kAuto;
  if (plan.per_rank) {
    // --dl-gpus asks for CUDA: compute and utility unless the image or job named capabilities.
    if (!plan.request.capabilities_set) plan.request.capabilities = kCapCompute | kCapUtility;
  } else if (plan.request.devices == NvidiaRequest::Devices::kVoid) {
    plan.notes.push_back("NVIDIA_VISIBLE_DEVICES is unset or void: no GPU (as with pyxis+enroot)");
    return plan;
  } else if (node_gpus(in.root).empty() && !in.host_cache->find("libcuda.so.1")) {
    // A CPU node running a CUDA image (every NGC image sets NVIDIA_VISIBLE_DEVICES=all).
    plan.notes.push_back("this node has no NVIDIA GPU and no driver");
    return plan;
  }
  plan.expose = true;
  plan.driver = host_driver(in.root, *in.host_cache);
  SLIPWAY_TRY(check_requirements(plan.request, plan.driver, in.image, in.node));
  if (!node_gpus(in.root).empty()) SLIPWAY_TRY(check_driver_libs(in, plan));
  plan.lib_dir = image_lib_dir(in.image_root);
  plan.binds = driver_binds(in.root, *in.host_cache, plan.request.capabilities, plan.lib_dir);
  use_compat(in, plan);
  cover_image_cache_entries(in.image_root, plan);
  if (plan.request.capabilities & kCapCompat32)
    plan.notes.push_back("compat32: the driver's 32-bit libraries are not bound");
  return plan;
}

namespace {

// NVIDIA_VISIBLE_DEVICES's list: the node GPUs its indexes and UUIDs name (as
// nvidia-container-cli --device takes them), which the step must hold; MIG names go to MIG.
Result<std::vector<int>> listed_gpus(const NvidiaRequest& req, const std::vector<GpuDevice>& gpus,
                                     const StepGpus& step, const std::string& node,
                                     std::vector<std::string>& mig) {
  std::string named = "NVIDIA_VISIBLE_DEVICES=";
  for (size_t i = 0; i < req.list.size(); ++i) named += (i ? "," : "") + req.list[i];
  named += " (" + req.devices_from + ")";
  std::vector<int> selected;
  for (const auto& token : req.list) {
    if (is_mig_name(token)) {
      mig.push_back(token);
      continue;
    }
    auto it = std::find_if(gpus.begin(), gpus.end(), [&](const GpuDevice& g) {
      return std::to_string(g.minor) == token || (!g.uuid.empty() && g.uuid == token);
    });
    if (it == gpus.end())
      return Status::error(named + " names GPU " + token + ", which " + node +
                               " does not have (the step's GPUs: " + step.source + ")",
                           ENODEV);
    if (std::find(step.minors.begin(), step.minors.end(), it->minor) == step.minors.end())
      return Status::error(named + " names GPU " + token + ", which this step does not hold on " +
                               node + " (" + step.source + "); name one of those, or 'all'",
                           ENODEV);
    if (std::find(selected.begin(), selected.end(), it->minor) == selected.end())
      selected.push_back(it->minor);
  }
  // MIG instances are chosen by CUDA among the step's GPUs (their parents' devices go in).
  if (!mig.empty()) selected = step.minors;
  return selected;
}

// The task's GPUs: by local rank (--dl-gpus), or as NVIDIA_VISIBLE_DEVICES names them.
Result<std::vector<int>> task_selection(const GpuNodePlan& node, const GpuTaskInput& in,
                                        const std::vector<GpuDevice>& gpus, const StepGpus& step,
                                        std::vector<std::string>& mig) {
  if (node.per_rank) {
    GpuRequest r{.mode = node.option.mode == GpuChoice::Mode::kAuto ? GpuRequest::Mode::kAuto
                                                                : GpuRequest::Mode::kCount,
                 .count = node.option.count, .local_rank = in.local_rank,
                 .local_tasks = in.local_tasks, .node = in.node};
    return select_gpus(step, r);
  }
  if (node.request.devices == NvidiaRequest::Devices::kAll) return step.minors;
  if (node.request.devices == NvidiaRequest::Devices::kList)
    return listed_gpus(node.request, gpus, step, in.node, mig);
  return std::vector<int>{};  // none: the driver only
}

// CUDA cannot start without these: say so before the task starts rather than let cuInit fail.
Status check_control_devices(const std::string& root, const std::string& node) {
  if (!exists(in_root(root, "/dev/nvidiactl")))
    return Status::error("node " + node + " has GPUs but no /dev/nvidiactl: the NVIDIA kernel "
                         "module is not loaded; an admin runs 'nvidia-modprobe' (or 'modprobe "
                         "nvidia'), or run without GPUs (--dl-gpus=none)", ENODEV);
  if (!exists(in_root(root, "/dev/nvidia-uvm")))
    return Status::error("node " + node + " has no /dev/nvidia-uvm, without which CUDA cannot "
                         "start: an admin loads it with 'nvidia-modprobe -u -c=0' (or 'modprobe "
                         "nvidia-uvm' and creates the device), or run without GPUs (--dl-gpus=none)",
                         ENODEV);
  return Status();
}

}  // namespace

Result<GpuTaskPlan> plan_gpu_task_exposure(const GpuNodePlan& node, const GpuTaskInput& in,
                                           std::string& source) {
  const auto gpus = node_gpus(in.root);
  auto step = step_gpus(gpus, in.slurm_step_gpus, in.cuda_visible_devices);
  if (!node.expose) {
    if (step.ok()) source = step->source;  // for --dl-explain
    return GpuTaskPlan{};
  }
  SLIPWAY_TRY(step);
  source = step->source;
  std::vector<std::string> mig;
  auto selected = task_selection(node, in, gpus, *step, mig);
  SLIPWAY_TRY(selected);
  GpuTaskPlan plan = plan_gpu_task(in.root, gpus, *selected, in.empty_dir);
  if (selected->empty()) {
    for (auto& b : control_device_binds(in.root)) plan.binds.push_back(std::move(b));
    if (node.request.devices == NvidiaRequest::Devices::kNone)
      plan.env.push_back({"NVIDIA_VISIBLE_DEVICES", "none", "the driver without a GPU, as asked"});
  }
  if (!mig.empty()) {
    std::string list;
    for (const auto& t : mig) list += (list.empty() ? "" : ",") + t;
    std::erase_if(plan.env, [](const EnvSetting& e) { return e.name == "CUDA_VISIBLE_DEVICES"; });
    plan.env.push_back({"CUDA_VISIBLE_DEVICES", list, "the MIG instances NVIDIA_VISIBLE_DEVICES names"});
  }
  if ((node.request.capabilities & kCapCompute) && !selected->empty())
    SLIPWAY_TRY(check_control_devices(in.root, in.node));
  return plan;
}

}  // namespace slipway::launcher
