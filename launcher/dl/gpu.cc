// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// GPU selection and the binds and environment of a task's GPUs (see gpu.h).
#include "dl/gpu.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

#include "dl/nvidia_env.h"

namespace slipway::launcher {
namespace {

constexpr const char* kControlDevices[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                           "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
constexpr const char* kProcGpus = "/proc/driver/nvidia/gpus";
// nvidia-persistenced's socket, through which NVML and CUDA reach the daemon that keeps the GPUs
// initialised (libnvidia-container binds it for compute and utility too).
constexpr const char* kPersistencedSocket = "/run/nvidia-persistenced/socket";

// The driver's user-space libraries and tools per capability, as soname prefixes (the driver
// version follows them: "libnvidia-gpucomp.so.580.65.06"); libnvidia-container's lists of the
// same names (NVIDIA/libnvidia-container src/nvc_info.c, its per-capability library lists).
struct DriverFiles {
  unsigned caps;
  std::vector<const char*> libs, tools;
};
const DriverFiles kDriverFiles[] = {
    {kCapUtility, {"libnvidia-ml.so.", "libnvidia-cfg.so."},
     {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"}},
    {kCapCompute,
     {"libcuda.so.", "libcudadebugger.so.", "libnvidia-ptxjitcompiler.so.", "libnvidia-nvvm.so.",
      "libnvidia-gpucomp.so.", "libnvidia-opencl.so.", "libnvidia-allocator.so.",
      "libnvidia-pkcs11.so.", "libnvidia-pkcs11-openssl3.so.", "libnvidia-fatbinaryloader.so."},
     {"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}},
    {kCapVideo, {"libvdpau_nvidia.so.", "libnvidia-encode.so.", "libnvidia-opticalflow.so.",
                 "libnvcuvid.so."}, {}},
    {kCapGraphics,
     {"libnvidia-eglcore.so.", "libnvidia-glcore.so.", "libnvidia-tls.so.", "libnvidia-glsi.so.",
      "libnvidia-fbc.so.", "libnvidia-rtcore.so.", "libnvoptix.so.", "libGLX_nvidia.so.",
      "libEGL_nvidia.so.", "libGLESv2_nvidia.so.", "libGLESv1_CM_nvidia.so.",
      "libnvidia-glvkspirv.so.", "libnvidia-gpucomp.so."}, {}},
    {kCapDisplay, {"libnvidia-wayland-client.so."}, {}},
};
// /usr/local/nvidia/bin: where nodes that keep the driver in /usr/local/nvidia (its lib64 in the
// ld.so cache) have nvidia-smi.
constexpr const char* kBinDirs[] = {"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin",
                                    "/usr/local/nvidia/bin"};

bool exists(const std::string& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0;
}

std::optional<int> to_int(std::string_view s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

std::string trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return trim(line);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "Device Minor: 2" and "GPU UUID: GPU-..." of /proc/driver/nvidia/gpus/BUS/information.
void read_information(const std::string& file, int& minor, std::string& uuid) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "Device Minor") minor = to_int(value).value_or(-1);
    if (key == "GPU UUID") uuid = value;
  }
}

std::string join_ints(const std::vector<int>& v, const char* sep = ",") {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : sep) + std::to_string(x);
  return out;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = std::min(s.find(sep, i), s.size());
    out.emplace_back(trim(std::string(s.substr(i, j - i))));
    i = j + 1;
  }
  return out;
}

// One GPU named in SLURM_STEP_GPUS or CUDA_VISIBLE_DEVICES: an index or a UUID.
Result<int> resolve_gpu(const std::vector<GpuDevice>& node, const std::string& token,
                        const std::string& source) {
  auto have = [&] {
    std::vector<int> m;
    for (const auto& g : node) m.push_back(g.minor);
    return m.empty() ? std::string("none") : format_cpulist(m);
  };
  if (auto idx = to_int(token)) {
    for (const auto& g : node)
      if (g.minor == *idx) return *idx;
    return Status::error(source + " names GPU " + token + ", but this node has no /dev/nvidia" +
                             token + " (its GPUs: " + have() + "); check gres.conf",
                         ENODEV);
  }
  for (const auto& g : node)
    if (!g.uuid.empty() && g.uuid == token) return g.minor;
  return Status::error(source + " names GPU '" + token + "', which is neither an index nor the " +
                           "UUID of a GPU of this node (its GPUs: " + have() + ")",
                       ENODEV);
}

}  // namespace

std::vector<GpuDevice> node_gpus(const std::string& root) {
  std::vector<GpuDevice> gpus;
  for (const auto& name : list_dir(in_root(root, "/dev"))) {
    if (name.rfind("nvidia", 0) != 0) continue;
    if (auto minor = to_int(std::string_view(name).substr(6))) gpus.push_back({*minor, "", ""});
  }
  const std::string proc = in_root(root, kProcGpus);
  for (const auto& bus : list_dir(proc)) {
    int minor = -1;
    std::string uuid;
    read_information(proc + "/" + bus + "/information", minor, uuid);
    for (auto& g : gpus)
      if (g.minor == minor) g.pci_bus_id = bus, g.uuid = uuid;
  }
  std::sort(gpus.begin(), gpus.end(), [](auto& a, auto& b) { return a.minor < b.minor; });
  return gpus;
}

Result<StepGpus> step_gpus(const std::vector<GpuDevice>& node,
                           const std::optional<std::string>& slurm_step_gpus,
                           const std::optional<std::string>& cuda_visible_devices) {
  std::string name, value;
  if (slurm_step_gpus && !slurm_step_gpus->empty()) {
    name = "SLURM_STEP_GPUS", value = *slurm_step_gpus;
  } else if (cuda_visible_devices && !cuda_visible_devices->empty()) {
    name = "CUDA_VISIBLE_DEVICES", value = *cuda_visible_devices;
  }
  StepGpus step;
  if (name.empty()) {
    for (const auto& g : node) step.minors.push_back(g.minor);
    step.source = "all " + std::to_string(node.size()) + " GPUs of the node (no GRES)";
    return step;
  }
  step.source = name + "=" + value;
  if (value == "NoDevFiles") return step;  // Slurm's value for GRES without device files
  for (const auto& token : split(value, ',')) {
    auto minor = resolve_gpu(node, token, step.source);
    SLIPWAY_TRY(minor);
    if (std::find(step.minors.begin(), step.minors.end(), *minor) != step.minors.end())
      return Status::error(step.source + " names GPU " + token + " twice", EINVAL);
    step.minors.push_back(*minor);
  }
  return step;
}

Result<std::vector<int>> select_gpus(const StepGpus& step, const GpuRequest& req) {
  using Mode = GpuRequest::Mode;
  if (req.mode == Mode::kNone) return std::vector<int>{};
  const int have = static_cast<int>(step.minors.size());
  const int tasks = req.local_tasks;
  if (tasks < 1 || req.local_rank < 0 || req.local_rank >= tasks)
    return Status::error("local rank " + std::to_string(req.local_rank) + " is outside the " +
                             std::to_string(tasks) + " tasks of node " + req.node, EINVAL);
  const std::string where = "the step's GPUs on " + (req.node.empty() ? "this node" : req.node) +
                            " (" + step.source + ")";
  int per = req.count;
  if (req.mode == Mode::kAuto) {
    per = have / tasks;
    if (per == 0)
      return Status::error("--dl-gpus=auto: " + std::to_string(tasks) + " tasks cannot share the " +
                               std::to_string(have) + " GPUs of " + where +
                               "; run at most " + std::to_string(have) +
                               " tasks per node (--ntasks-per-node) or ask for more GPUs (--gres=gpu:" +
                               std::to_string(tasks) + ")",
                           ENODEV);
  } else if (per * tasks > have) {
    return Status::error("--dl-gpus=" + std::to_string(per) + ": " + std::to_string(tasks) +
                             " tasks need " + std::to_string(per * tasks) + " GPUs, but there are " +
                             std::to_string(have) + " in " + where + "; ask for --gres=gpu:" +
                             std::to_string(per * tasks) +
                             ", fewer tasks per node (--ntasks-per-node) or fewer --dl-gpus",
                         ENODEV);
  }
  auto first = step.minors.begin() + req.local_rank * per;
  return std::vector<int>(first, first + per);
}

GpuTaskPlan plan_gpu_task(const std::string& root, const std::vector<GpuDevice>& node,
                          const std::vector<int>& selected, const std::string& empty_dir) {
  GpuTaskPlan plan;
  plan.minors = selected;
  if (selected.empty()) return plan;
  const std::string list = join_ints(selected);
  auto device = [&](const std::string& path, const std::string& why) {
    plan.binds.push_back({{.source = in_root(root, path), .destination = path,
                           .read_only = false, .recursive = false, .allow_devices = true},
                          why});
  };
  for (int m : selected) device("/dev/nvidia" + std::to_string(m), "this task's GPU " + std::to_string(m));
  for (auto& b : control_device_binds(root)) plan.binds.push_back(std::move(b));
  std::vector<std::string> ids;
  std::set<int> cpus;
  for (const auto& g : node) {
    bool mine = std::find(selected.begin(), selected.end(), g.minor) != selected.end();
    if (mine) ids.push_back(g.uuid.empty() ? std::to_string(g.minor) : g.uuid);
    if (g.pci_bus_id.empty()) continue;
    const std::string entry = std::string(kProcGpus) + "/" + g.pci_bus_id;
    if (!mine && !empty_dir.empty() && exists(in_root(root, entry)))
      plan.binds.push_back({{.source = empty_dir, .destination = entry, .read_only = true,
                             .recursive = false},
                            "hide GPU " + std::to_string(g.minor) + " of another task from NVML"});
    if (!mine) continue;
    const std::string sys = in_root(root, "/sys/bus/pci/devices/" + g.pci_bus_id);
    auto local = parse_cpulist(read_first_line(sys + "/local_cpulist"));
    if (!local.ok() || local->empty()) continue;
    cpus.insert(local->begin(), local->end());
    std::string numa = read_first_line(sys + "/numa_node");
    plan.cpus_why += std::string(plan.cpus_why.empty() ? "" : "; ") + "GPU " +
                     std::to_string(g.minor) + " (" + g.pci_bus_id + ", NUMA node " +
                     (numa.empty() ? "?" : numa) + ") is local to CPUs " + format_cpulist(*local);
  }
  plan.cpus.assign(cpus.begin(), cpus.end());
  std::vector<int> reindexed;
  for (size_t i = 0; i < selected.size(); ++i) reindexed.push_back(static_cast<int>(i));
  plan.env.push_back({"CUDA_VISIBLE_DEVICES", join_ints(reindexed),
                      "the task sees only node GPU(s) " + list + ", which CUDA numbers from 0"});
  std::string nv;
  for (const auto& id : ids) nv += (nv.empty() ? "" : ",") + id;
  plan.env.push_back({"NVIDIA_VISIBLE_DEVICES", nv, "the node's name(s) for this task's GPU(s)"});
  plan.env.push_back({"CUDA_DEVICE_ORDER", "PCI_BUS_ID",
                      "number the task's GPUs in /dev/nvidiaN order, as CUDA_VISIBLE_DEVICES does",
                      false});
  return plan;
}

std::vector<PlannedBind> driver_binds(const std::string& root, const LdCache& host_cache,
                                      unsigned caps, const std::string& lib_dir) {
  std::vector<PlannedBind> out;
  std::set<std::string> seen;  // a soname selected by two capabilities is bound once
  for (const auto& set : kDriverFiles) {
    if (!(caps & set.caps)) continue;
    for (const char* prefix : set.libs)
      for (const auto* e : host_cache.with_prefix(prefix)) {
        if (!seen.insert(e->name).second) continue;
        out.push_back({{.source = in_root(root, e->path), .destination = lib_dir + "/" + e->name,
                        .read_only = true, .recursive = false},
                       "NVIDIA driver library (host ld.so cache: " + e->path + ")"});
      }
    for (const char* tool : set.tools)
      for (const char* dir : kBinDirs) {
        std::string host = std::string(dir) + "/" + tool;
        if (!exists(in_root(root, host))) continue;
        out.push_back({{.source = in_root(root, host), .destination = std::string("/usr/bin/") + tool,
                        .read_only = true, .recursive = false},
                       "NVIDIA driver tool " + host});
        break;
      }
  }
  if ((caps & (kCapCompute | kCapUtility)) && exists(in_root(root, kPersistencedSocket)))
    out.push_back({{.source = in_root(root, kPersistencedSocket), .destination = kPersistencedSocket,
                    .read_only = false, .recursive = false},
                   "nvidia-persistenced's socket"});
  return out;
}

std::vector<PlannedBind> control_device_binds(const std::string& root) {
  std::vector<PlannedBind> out;
  auto device = [&](const char* path, const char* why) {
    out.push_back({{.source = in_root(root, path), .destination = path, .read_only = false,
                    .recursive = false, .allow_devices = true},
                   why});
  };
  for (const char* ctl : kControlDevices)
    if (exists(in_root(root, ctl))) device(ctl, "driver control device, needed by every CUDA program");
  if (exists(in_root(root, "/dev/nvidia-caps"))) device("/dev/nvidia-caps", "MIG and fabric capability devices");
  return out;
}

Result<std::vector<int>> parse_cpulist(std::string_view text) {
  std::set<int> cpus;
  if (trim(std::string(text)).empty()) return std::vector<int>{};
  for (const auto& part : split(text, ',')) {
    size_t dash = part.find('-');
    auto lo = to_int(std::string_view(part).substr(0, dash));
    auto hi = dash == std::string::npos ? lo : to_int(std::string_view(part).substr(dash + 1));
    if (!lo || !hi || *hi < *lo || *hi - *lo > 65536)
      return Status::error("bad CPU list '" + std::string(text) + "'", EINVAL);
    for (int c = *lo; c <= *hi; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string format_cpulist(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace slipway::launcher
