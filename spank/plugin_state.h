// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// What the plugin remembers between SPANK callbacks of one process (srun, sbatch, salloc or one
// slurmstepd): the site configuration, the job's options, and on a node the imported image or the
// error to raise in task_init (Slurm does not report user_init failures to srun: bug 7573).
#pragma once

#include <optional>
#include <string>

#include "config.h"
#include "image/import.h"
#include "image/cache.h"
#include "options/container_instances.h"
#include "options/job_options.h"
#include "remote_env.h"
#include "runtime/container.h"
#include "runtime/seccomp.h"
#include "step/step.h"
#include "spank_c.h"

namespace slipway::spank {

// The job options live in launcher/options (shared with `slipway run`).
using launcher::apply_env_defaults;
using launcher::apply_option;
using launcher::DlGpus;
using launcher::JobOptions;
using launcher::MountSpec;
using launcher::NameMode;
using launcher::option_table;
using launcher::OptionId;
using launcher::OptionSpec;
using launcher::parse_mounts;
using launcher::Result;
using launcher::Status;
using launcher::validate_options;

struct PluginState {
  PluginConfig config;
  JobOptions options;
  std::optional<StepIds> ids;                    // set in user_init for containerized steps
  bool first_node = false;                       // node 0 of the step (--container-save)
  // --container-save on the first node: how many of the node's tasks still run, in memory shared
  // with the tasks (remote_task.cc, save_after_command()); null otherwise.
  int* tasks_running = nullptr;
  // Set by user_init on success: the image (held in use) and the node's container, as the holder
  // built it (a joined container's settings are the instance's): launcher/step/step.h.
  std::optional<launcher::Step> step;
  launcher::ContainerHolder holder;              // the node's container for this step
  std::optional<launcher::SeccompProgram> seccomp;  // runtime/seccomp.h, for every task
  std::string cache_dir;                         // the node cache this step uses
  std::string deferred_error;                    // set by user_init on failure
  std::string named_dir;                         // --container-name: its directory on this node
  bool named_exists = false;                     // it was there before this step
  std::optional<launcher::FileLock> named_lock;  // held while the step starts or joins it
  std::optional<launcher::Instance> running;     // the instance this step joins or copies
  std::string instances_dir;                     // where the step records its holder
  std::vector<std::string> entrypoint_env;       // what the image's entrypoint exported
  std::string entrypoint_output;                 // shown with --container-entrypoint-log
};

PluginState& state();

// Environment variables by which srun/sbatch/salloc pin the image digest for every node.
inline constexpr const char* kEnvImageRef = "SLIPWAY_IMAGE_REF";
inline constexpr const char* kEnvImageDigest = "SLIPWAY_IMAGE_DIGEST";
// The directory srun/sbatch/salloc ran in, against which relative paths in options resolve on the
// nodes as they did in the client (SLURM_SUBMIT_DIR is the allocation's, not a later srun's).
inline constexpr const char* kEnvClientCwd = "SLIPWAY_CLIENT_CWD";

// Context handlers, one file each: client.cc (srun, sbatch, salloc), remote_import.cc (user_init),
// remote_task.cc (task_init). Each returns 0 or -1 and never throws.
int client_init_post_opt(spank_t sp);
int remote_user_init(spank_t sp);
int remote_task_init(spank_t sp);
int remote_exit(spank_t sp);

// Fills state().options from the options slurmstepd received in the launch message, then from the
// job's SLIPWAY_CONTAINER_* / PYXIS_CONTAINER_* variables; relative paths resolve against `cwd`.
void load_remote_options(spank_t sp, const std::string& cwd);

// The directory relative paths in options resolve against on a node: kEnvClientCwd, else
// SLURM_SUBMIT_DIR, else PWD, else "/".
std::string client_cwd(spank_t sp);

// remote_container.cc: the node's container for the step (named or not), started in user_init
// once the image is known; finish at the end of the step (slurm_spank_exit); job epilog cleanup.
launcher::Status prepare_named_container(PluginState& st);
launcher::SiteDefaults site_defaults(const PluginConfig& cfg);
std::string node_name();
launcher::Status start_node_container(spank_t sp, PluginState& st);
void finish_node_container(PluginState& st);
int remote_job_epilog(spank_t sp);
launcher::Result<std::string> named_container_image(const PluginState& st);
std::string cache_dir_for(const PluginConfig& cfg, uid_t uid);

}  // namespace slipway::spank
