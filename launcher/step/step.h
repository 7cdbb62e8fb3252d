// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The life of a step's container on one node, once, for both edges that drive it: the plugin
// (spank/: Slurm's callbacks in slurmstepd) and `slipway run` (cli/: the command line and the
// SLURM_* variables). An edge translates its context into these calls and does only what is its
// own (docs/architecture.md, "The flow of one job step"):
//
//   prepare_step()   the image (a named container's, or imported by the edge), held in use in the
//                    cache, recorded for a new named container; the container's plan
//   wants_entrypoint() and step_entrypoint()   --container-entrypoint, once per node
//   task_entry()     what a task sets before it enters: the image's Env, what the entrypoint
//                    exported, HOME, PMIx's settings, and its own binds (PMIx, working directory)
//   join_container() (runtime/container.h), then lock_down(): no_new_privs, the seccomp filter
//   save_step()      --container-save, while the holder still keeps the container
//
// What differs between the edges on purpose stays with them, each said where it is:
//   - how the import runs: the plugin in a child that becomes the user (slurmstepd's other threads
//     must stay root: spank/import_child.h), `slipway run` in its own process, as the user;
//   - how the node's tasks share the container: the plugin's holder belongs to slurmstepd, which
//     outlives the tasks and joins or copies a running named container (pyxis's semantics);
//     `slipway run` has only the tasks, so the first starts a detached holder recorded in the
//     step's directory (cli/run_step.h);
//   - the seccomp filter: compiled once per step by slurmstepd, cached in a file by `slipway run`,
//     which compiles it at every start otherwise (bench/launch);
//   - where settings come from: plugstack.conf for the plugin, SLIPWAY_* for `slipway run`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "dl/fabric.h"
#include "image/cache.h"
#include "image/import.h"
#include "options/container_plan.h"
#include "options/entrypoint.h"
#include "options/job_options.h"
#include "runtime/container.h"
#include "runtime/seccomp.h"

namespace slipway::launcher {

struct StepInput {
  JobOptions options;
  SiteDefaults site;
  PlanInput plan;  // rootfs and squashfs_file are filled in from the image
  // The node's fabric devices every container gets (dl/fabric.h): fabric_devices= for the
  // plugin, SLIPWAY_FABRIC_DEVICES for `slipway run`.
  FabricPolicy fabric = default_fabric_policy();
  // The image a named or running container records (its identity); empty: import one.
  std::string recorded_image;
  // How this edge imports options.container_image (see above); called again when an rm or gc
  // removed the image before it could be held in use.
  std::function<Result<ImportedImage>()> import;
};

struct Step {
  ImportedImage image;
  LaunchSpec spec;
  // Held while the step runs: `slipway rm` and `gc` skip the image (image/cache.h mark_in_use).
  // Empty for a squashfs file, mounted from where it lies.
  std::optional<FileLock> image_in_use;
};

// The image, held in use, and the container's plan (with the node's fabric devices in its /dev);
// a new named container records its image.
Result<Step> prepare_step(const StepInput& in);

// --container-entrypoint (or the site's default): whether the image's entrypoint runs.
bool wants_entrypoint(const Step& step, const JobOptions& options, bool site_default);

// Runs the image's entrypoint in HOLDER's container with the job's environment JOB_ENV
// (options/entrypoint.h): its output, and the variables it exported.
Result<EntrypointRun> step_entrypoint(const ContainerHolder& holder, const Step& step,
                                      const JobOptions& options,
                                      const std::vector<std::string>& job_env);

struct TaskInput {
  std::string home;  // the user's home outside
  std::vector<std::string> entrypoint_env;  // what the entrypoint exported, NAME=VALUE
  // The job's value of NAME, if the job has it (the task's own environment).
  std::function<std::optional<std::string>(const std::string&)> job_env;
};

struct TaskEntry {
  std::vector<std::pair<std::string, std::string>> env;  // to set, overwriting
  TaskView view;
};

// What a task sets and binds before it enters: the image's Env and the entrypoint's exports
// (options/container_plan.h image_settings), HOME inside, and for a PMIx step the server's
// directory bound at the same path, or else PMIX_MCA_gds=hash (without it the shared-memory
// store cannot be used), and PMIX_MCA_psec=munge when root is remapped inside (only munge can
// then prove who the task is to Slurm's PMIx server: docs/platform.md, "PMIx"); neither over the
// job's own value.
TaskEntry task_entry(const Step& step, const JobOptions& options, const TaskInput& in);

// The task's last steps before its command: no privileges to gain (setuid binaries, file
// capabilities), then the seccomp filter FILTER (compiled before: runtime/seccomp.h).
Status lock_down(const std::optional<SeccompProgram>& filter);

// --container-save: the container of HOLDER_PID to options.save_path (options/save.h).
Status save_step(pid_t holder_pid, const Step& step, const JobOptions& options,
                 const std::string& cache_dir);

}  // namespace slipway::launcher
