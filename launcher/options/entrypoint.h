// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// --container-entrypoint for the plugin and `slipway run` alike: the image's entrypoint runs once
// per node's container, before the tasks, with the image's Env and the --container-env names; it
// ends by exec'ing a shell that hands its environment back through fd 3 (entrypoints end with
// `exec "$@"`, as Docker's and enroot's /etc/rc do), and what it exported reaches every task.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "image/manifest.h"
#include "options/job_options.h"
#include "runtime/container.h"

namespace slipway::launcher {

inline constexpr int kEntrypointTimeoutS = 120;

struct EntrypointRun {
  std::vector<std::string> exported;  // NAME=VALUE it exported (set or changed)
  std::string output;                 // its stdout and stderr, for --container-entrypoint-log
};

// PATH for an image whose Env sets none (what Docker gives such an image).
inline constexpr const char* kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// The environment the entrypoint starts with, as pyxis gives it: the image's Env, with the job's
// values of the --container-env names (those the job has) over it; not the rest of the job's
// environment, which the tasks get after it. PATH defaults to kDefaultPath.
std::vector<std::string> entrypoint_start_env(const std::vector<std::string>& job_env,
                                              const ImageConfig& config, const JobOptions& opts);

// What an environment block (NUL-separated, as /proc/self/environ) has that BEFORE had not; the
// shell's own PWD, SHLVL and _ left out.
std::vector<std::string> exported_variables(const std::string& environ_block,
                                            const std::vector<std::string>& before);

// Runs ENTRYPOINT in HOLDER's container as SPEC.uid with START_ENV. A failure, or a non-zero
// status, is one line naming the entrypoint, its last output line and the fix.
Result<EntrypointRun> run_entrypoint(const ContainerHolder& holder, const LaunchSpec& spec,
                                     const std::vector<std::string>& entrypoint,
                                     const std::vector<std::string>& start_env);

}  // namespace slipway::launcher
