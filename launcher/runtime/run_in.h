// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Running one command inside a node's container from outside it (slurmstepd or `slipway`), with a
// time limit, its output captured, and an extra pipe on its fd 3: how the image's entrypoint runs
// once per node (--container-entrypoint) and hands back the environment it exported.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/container.h"

namespace slipway::launcher {

struct RunResult {
  int exit_code = 0;   // the command's, or 128+signal
  std::string output;  // stdout and stderr, interleaved
  std::string fd3;     // what it wrote to fd 3
};

// Runs `argv` (looked up with `env`'s PATH inside the container) as spec.uid in the container of
// `holder`; kills it after `timeout_s`, which is then an error.
Result<RunResult> run_in_container(const ContainerHolder& holder, const LaunchSpec& spec,
                                   const std::vector<std::string>& argv,
                                   const std::vector<std::string>& env, int timeout_s);

}  // namespace slipway::launcher
