// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// --dl-explain: what one task would get (binds, environment, injected libraries, CPU affinity)
// and why, printed on the task's standard output; then the task ends without running anything.
#pragma once

#include <string>
#include <vector>

#include "dl/dl_env.h"
#include "dl/gpu.h"
#include "dl/gpu_exposure.h"
#include "dl/host_libs.h"

namespace slipway::spank {

// Everything prepare_dl_task decided for one task.
struct TaskPlan {
  launcher::TaskPlacement placement;
  std::string node;
  std::vector<launcher::EnvSetting> env;  // DL variables and LD_LIBRARY_PATH
  launcher::GpuTaskPlan gpu;
  std::string gpu_source;  // where the step's GPUs came from
};

// The explanation as lines of text (unit-testable).
std::string explain_text(const TaskPlan& plan, const launcher::InjectionPlan& injection,
                         const launcher::GpuNodePlan& gpu, const std::string& failure);

// Writes explain_text() to fd 1 and ends the task: status 0, or 1 when `failure` is set (the
// launch would have failed with it).
[[noreturn]] void explain_and_exit(const TaskPlan& plan, const launcher::InjectionPlan& injection,
                                   const launcher::GpuNodePlan& gpu,
                                   const std::string& failure);

}  // namespace slipway::spank
