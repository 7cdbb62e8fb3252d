// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// GPUs for one task: which of the node's NVIDIA GPUs the step holds (Slurm's GRES allocation, or
// every GPU when the site does not use GRES), which of them a task gets by local rank, and what
// the task's private mount namespace and environment need for exactly those. Pure functions of a
// root directory (the real "/" on a node, a fake /dev + /sys + /proc tree in tests) and of values
// read from the task's environment; nothing here mounts or sets anything.
//
// GPU numbers are the device minors (/dev/nvidiaN): Slurm's gres.conf lists File=/dev/nvidia[0-7]
// in minor order on every site we know, so the GRES index of a GPU is its minor.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "dl/dl_types.h"
#include "dl/ld_cache.h"

namespace slipway::launcher {

struct GpuDevice {
  int minor = -1;          // N of /dev/nvidiaN
  std::string pci_bus_id;  // "0000:3b:00.0" from /proc/driver/nvidia/gpus; empty if unknown
  std::string uuid;        // "GPU-..." from the same file; empty if unknown
};

// The node's GPUs: /dev/nvidiaN under `root`, with their PCI address and UUID when the driver's
// /proc/driver/nvidia/gpus/*/information says; sorted by minor.
std::vector<GpuDevice> node_gpus(const std::string& root);

// The GPUs the step holds on this node, in Slurm's order.
struct StepGpus {
  std::vector<int> minors;
  std::string source;  // for messages: "SLURM_STEP_GPUS=0,2", "all 4 GPUs of the node"
};

// From SLURM_STEP_GPUS (slurmstepd sets it to the GRES indexes of the step), else
// CUDA_VISIBLE_DEVICES as slurmstepd set it (indexes or GPU UUIDs), else every GPU of the node.
// A GPU named there that the node does not have is an error.
Result<StepGpus> step_gpus(const std::vector<GpuDevice>& node,
                           const std::optional<std::string>& slurm_step_gpus,
                           const std::optional<std::string>& cuda_visible_devices);

struct GpuRequest {
  enum class Mode { kNone, kCount, kAuto };
  Mode mode = Mode::kNone;
  int count = 0;            // for kCount
  int local_rank = 0;       // SLURM_LOCALID
  int local_tasks = 1;      // tasks of the step on this node
  std::string node = "";    // node name, for messages
};

// Local rank r gets the r-th group of N GPUs of the step (N = count, or for auto
// floor(GPUs / local tasks)). Fails, the same way on every task of the node, when the node's tasks
// need more GPUs than the step holds.
Result<std::vector<int>> select_gpus(const StepGpus& step, const GpuRequest& req);

struct GpuTaskPlan {
  std::vector<int> minors;         // the task's GPUs
  std::vector<PlannedBind> binds;  // device nodes, and empty dirs over other GPUs' /proc entries
  std::vector<EnvSetting> env;     // CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, ...
  std::vector<int> cpus;           // the cores local to the GPUs (empty: sysfs does not say)
  std::string cpus_why;
};

// What a task with GPUs `selected` needs: its /dev/nvidiaN, the control devices that exist
// (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-caps/), `empty_dir` bound over the /proc
// entries of the node's other GPUs (so NVML and nvidia-smi see only these), CUDA_VISIBLE_DEVICES
// re-indexed from 0, NVIDIA_VISIBLE_DEVICES, and the NUMA-local cores from sysfs.
GpuTaskPlan plan_gpu_task(const std::string& root, const std::vector<GpuDevice>& node,
                          const std::vector<int>& selected, const std::string& empty_dir);

// The driver's user-space libraries that capabilities CAPS select (nvidia_env.h; libnvidia-container's
// lists per capability), as the host's ld.so cache has them, bound read-only under LIB_DIR inside,
// and its tools (nvidia-smi, ...) from the host's bin directories, bound over /usr/bin/NAME.
std::vector<PlannedBind> driver_binds(const std::string& root, const LdCache& host_cache,
                                      unsigned caps, const std::string& lib_dir);

// The driver's control devices that exist (nvidiactl, nvidia-uvm, nvidia-uvm-tools,
// nvidia-modeset, nvidia-caps/), as device binds.
std::vector<PlannedBind> control_device_binds(const std::string& root);

// "0-3,8,10-11" (sysfs cpulist(5) syntax) to {0,1,2,3,8,10,11}.
Result<std::vector<int>> parse_cpulist(std::string_view text);
// {0,1,2,3,8} to "0-3,8".
std::string format_cpulist(const std::vector<int>& cpus);

}  // namespace slipway::launcher
