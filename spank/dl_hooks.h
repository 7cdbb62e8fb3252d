// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Seams between the container plumbing (remote_import.cc, remote_task.cc) and the deep-learning
// wiring (dl_task.cc: GPUs by local rank, DL environment, host library injection, --dl-explain).
#pragma once

#include "plugin_state.h"
#include "spank_c.h"

namespace slipway::spank {

// user_init, before the node's container is built: add node-wide binds (injected host libraries,
// their ld.so configuration) to `spec`. An error fails the step (raised in task_init).
launcher::Status prepare_dl_node(spank_t sp, const PluginState& st, launcher::LaunchSpec& spec);

// task_init, before the task joins the container: add this task's binds (its GPUs) to `view` and
// set its environment (RANK, LOCAL_RANK, CUDA_VISIBLE_DEVICES, ...) with spank_setenv.
launcher::Status prepare_dl_task(spank_t sp, const PluginState& st, launcher::TaskView& view);

}  // namespace slipway::spank
