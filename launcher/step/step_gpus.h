// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// A step's GPUs for both edges (the plugin and `slipway run`): the --dl-gpus option (or the site's
// default) and the container's NVIDIA_* variables, from the image's Env and the job's environment,
// turned into the node-wide exposure plan (dl/gpu_exposure.h). Each edge then asks
// plan_gpu_task_exposure() for a task's part with what it knows of the task.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dl/gpu_exposure.h"
#include "options/job_options.h"
#include "step/step.h"

namespace slipway::launcher {

struct StepGpuInput {
  DlGpus site_default;  // plugstack dl_gpus= (the plugin) or unset
  // The job's value of NAME, and the names of the job's variables.
  std::function<std::optional<std::string>(const std::string&)> job_env;
  std::vector<std::string> job_env_names;
  std::string node;
  std::string root = "/";
};

// --dl-gpus if given, else the site's default, else the NVIDIA_* variables.
GpuChoice gpu_choice(const DlGpus& option, const DlGpus& site_default);

// The node-wide plan for STEP's container: reads the host's ld.so cache.
Result<GpuNodePlan> plan_step_gpus(const Step& step, const JobOptions& options,
                                   const StepGpuInput& in);

}  // namespace slipway::launcher
