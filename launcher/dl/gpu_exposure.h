// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Which GPUs and which parts of the NVIDIA driver a step's container gets, decided once for both
// edges (the plugin's user_init/task_init and `slipway run`): by default as pyxis+enroot do, from
// the container's NVIDIA_* variables (nvidia_env.h); with --dl-gpus=N|auto split by local rank;
// with --dl-gpus=none nothing. The driver's libraries are bound into a directory the image's
// dynamic loader searches by default, so no LD_LIBRARY_PATH is needed (a program that resets it
// still finds libcuda.so.1), and an image's CUDA forward-compatibility libraries replace the
// node's when the node's driver is older (as libnvidia-container does).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "dl/dl_types.h"
#include "dl/gpu.h"
#include "dl/ld_cache.h"
#include "dl/nvidia_env.h"

namespace slipway::launcher {

// --dl-gpus as launcher/options parsed it (this layer does not see options/).
struct GpuChoice {
  enum class Mode { kEnv, kNone, kCount, kAuto };  // kEnv: no --dl-gpus, NVIDIA_* decide
  Mode mode = Mode::kEnv;
  int count = 0;
};

struct GpuNodeInput {
  std::string root = "/";          // the node's /dev, /proc, /sys and driver files
  const LdCache* host_cache = nullptr;
  std::string image_root;          // the unpacked image; empty for a squashfs image
  std::string image;               // as the user wrote it, for messages
  std::string node;                // node name, for messages
  GpuChoice option;                // --dl-gpus
  NvidiaEnvSource env;
};

struct GpuNodePlan {
  bool expose = false;    // the container gets GPUs (or, for NVIDIA_VISIBLE_DEVICES=none, the driver)
  bool per_rank = false;  // --dl-gpus=N|auto: GPUs split by local rank
  GpuChoice option;
  NvidiaRequest request;
  DriverInfo driver;
  std::string lib_dir;    // where the driver's libraries appear inside
  std::vector<PlannedBind> binds;   // driver libraries and tools, node-wide
  std::vector<std::string> notes;   // why exposure is off, forward compatibility, ... (--dl-explain)
};

// The node-wide part. Errors: an NVIDIA_REQUIRE_* the node's driver does not meet, a node with
// GPUs whose driver libraries are missing from the ld.so cache.
Result<GpuNodePlan> plan_gpu_node(const GpuNodeInput& in);

struct GpuTaskInput {
  std::string root = "/";
  std::optional<std::string> slurm_step_gpus, cuda_visible_devices;  // the job's values
  int local_rank = 0, local_tasks = 1;
  std::string node;
  std::string empty_dir;  // an empty directory of the user's, to hide other GPUs' /proc entries
};

// The task's part: its GPUs' device nodes, the driver's control devices, CUDA_VISIBLE_DEVICES...
// Errors: a GPU named in NVIDIA_VISIBLE_DEVICES the step does not hold, more GPUs asked than held,
// a missing /dev/nvidiactl or /dev/nvidia-uvm (one line with the fix). SOURCE gets where the
// step's GPUs came from.
Result<GpuTaskPlan> plan_gpu_task_exposure(const GpuNodePlan& node, const GpuTaskInput& in,
                                           std::string& source);

// Narrows this process's CPU affinity to CPUS where they overlap it, never widening what Slurm's
// task affinity chose; nothing for an empty list.
void narrow_affinity(const std::vector<int>& cpus);

// The image's default library directory the driver's libraries go to: the first of
// /usr/lib/<multiarch>, /usr/lib64 and /usr/lib that IMAGE_ROOT has (ld.so's system search path,
// ld.so(8)); /usr/lib/<multiarch> when the image cannot be looked into.
std::string image_lib_dir(const std::string& image_root);

}  // namespace slipway::launcher
