// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// From job options to a container: the LaunchSpec of a node's container (binds, home, mounts,
// namespaces, writable or named), and the directories of named containers. Shared by the SPANK
// plugin and `slipway run`, so both build the same container from the same options.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "image/cache.h"
#include "image/import.h"
#include "options/container_instances.h"
#include "options/job_options.h"
#include "runtime/container.h"
#include "runtime/launch_spec.h"

namespace slipway::launcher {

// What the site decides when the user does not (plugstack.conf, or the module's environment).
struct SiteDefaults {
  bool mount_home = true;
  bool remap_root = false;
  bool writable = false;  // a writable root by default (named containers always are)
  std::string mounts;  // extra mounts for every container, --container-mounts syntax
};

struct PlanInput {
  std::string rootfs;     // the image's unpacked root in the node cache
  std::string squashfs_file;  // or the squashfs image file to mount (LaunchSpec::squashfs_file)
  std::string cache_dir;  // the user's node cache (its mnt/ is the private mount point)
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;       // the job's home directory (job_home()); empty: none
  std::string named_dir;  // a named container's directory; empty: an unnamed one
  std::string node;       // the node's name, for messages
};

Result<LaunchSpec> plan_container(const JobOptions& opts, const SiteDefaults& site,
                                  const PlanInput& in);

// A named container's directory on this node. LOCK is held while a step starts or joins it (until
// its holder is recorded in the instance directory): steps start one at a time, then share it.
struct NamedContainer {
  std::string dir;
  bool exists = false;  // made by an earlier step (its image is recorded in dir/image)
  std::optional<Instance> running;  // a live instance on this node: to join, or for no_exec to
                                    // start a new instance of
  FileLock lock;
};

// Opens NAME under `scope_dir` as its --container-name mode says (pyxis's meanings): auto joins a
// running instance, else starts one (from the image the first time); exec joins a running
// instance and fails without one; no_exec starts a new instance (of the running one's root, if
// any, so that both see the same files); create fails if NAME exists. Waits for NAME's lock up to
// WAIT_S seconds.
inline constexpr int kNamedLockWaitS = 120;
Result<NamedContainer> open_named_container(const JobOptions& opts, const std::string& scope_dir,
                                            const std::string& node, int wait_s = kNamedLockWaitS);
// The manifest digest of the image a named container was made from / records it.
// Whether a squashfs file given as the image is mounted (OPTS.mount_squashfs) or unpacked, and
// why not, for a step saving to SAVE_PATH ("": none). Call it as the job user, who must be able
// to open /dev/fuse.
void choose_squashfs_mount(ImportOptions& opts, const std::string& save_path);

Result<std::string> named_container_image(const std::string& dir, const std::string& name);
Status record_named_container_image(const std::string& dir, const std::string& digest);

// Environment precedence (slipway(1), ENVIRONMENT): the image's Env (and what its entrypoint
// exported) override the job's environment, except the per-task variables (SLURM_*, PMIX_*, PMI_*,
// OMPI_*, SLIPWAY_*), which the image never sets, and the variables named by --container-env that
// the job has (JOB_HAS_IT): a name the job lacks keeps the image's value, as in pyxis.
bool image_may_set(const JobOptions& opts, const std::string& name, bool job_has_it);

// What the image sets in a task: its Env, then what its entrypoint exported, as image_may_set()
// allows, every name judged against the job's environment before any is set (JOB_HAS).
std::vector<std::pair<std::string, std::string>> image_settings(
    const JobOptions& opts, const std::vector<std::string>& image_env,
    const std::vector<std::string>& exported,
    const std::function<bool(const std::string&)>& job_has);

// The home directory --container-mount-home binds, as enroot's home hook has it: the job's HOME,
// or when HOME is unset or empty, UID's home in the user database ("" if it has none).
std::string job_home(const std::optional<std::string>& home_env, uid_t uid);

// Where --container-mount-home binds the home directory with --container-remap-root.
inline constexpr const char* kRemappedHome = "/root";
// HOME inside the container where --container-mount-home bound HOME (kRemappedHome with root
// remapped, else HOME itself, which the job may lack: enroot sets it then); else empty.
std::string container_home(const LaunchSpec& spec, const std::string& home);

// A task's working directory, as pyxis's: --container-workdir; else the image's WorkingDir
// (IMAGE_WORKDIR, when absolute); else "/".
void add_working_directory(const JobOptions& opts, const std::string& image_workdir,
                           TaskView& view);

// mkdir -p with mode 0700 for what it creates.
Status make_private_dirs(const std::string& path);
// Removes a directory tree without following symlinks; a missing tree is fine.
Status remove_dir_tree(const std::string& path);

}  // namespace slipway::launcher
