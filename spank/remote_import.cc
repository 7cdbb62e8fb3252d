// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// user_init on each node (slurmstepd, effective uid already the job user): import the step's image
// into the node cache once, then start the node's container holder, which the step's tasks join in
// task_init; or remember why not. Errors are kept for task_init because Slurm does not report
// user_init failures to srun (bug 7573).
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "image/cache.h"
#include "image/image_ref.h"
#include "image/manifest_handoff.h"
#include "dl_hooks.h"
#include "import_child.h"
#include "log.h"
#include "plugin_state.h"
#include "remote_env.h"
#include "options/container_plan.h"
#include "options/save.h"

namespace slipway::spank {
namespace {

launcher::Result<launcher::ImportedImage> import_for(spank_t sp, const StepIds& ids) {
  PluginState& st = state();
  launcher::RefDefaults defaults;
  defaults.default_registry = st.config.default_registry;
  defaults.cwd = client_cwd(sp);
  auto ref = launcher::parse_image_ref(st.options.container_image, defaults);
  SLIPWAY_TRY(ref);
  auto pinned_ref = job_getenv(sp, kEnvImageRef);
  auto pinned_digest = job_getenv(sp, kEnvImageDigest);
  if (ref->digest.empty() && pinned_ref && pinned_digest && *pinned_ref == ref->str())
    ref->digest = *pinned_digest;
  launcher::ImportOptions opts;
  // srun's copy of the manifest: import_image uses it only if it hashes to ref->digest.
  if (auto handoff = job_getenv(sp, launcher::kManifestHandoffEnv); handoff && !ref->digest.empty())
    if (auto body = launcher::decode_manifest_handoff(*handoff); body.ok()) opts.manifest = *body;
  opts.cache_dir = st.cache_dir;
  opts.bounds = st.config.import_bounds;
  opts.registry.insecure_registries = st.config.insecure_registries;
  opts.registry.mirrors = st.config.registry_mirrors;
  opts.registry.ca_file = st.config.ca_file;
  opts.registry.min_rate_bytes = st.config.registry_min_rate;
  opts.registry.timeout_s = st.config.registry_timeout_s;
  opts.registry.mirror_silence_s = st.config.registry_mirror_timeout_s;
  std::string creds = home_of(ids.uid) + "/.config/slipway/credentials";
  if (access(creds.c_str(), R_OK) == 0) opts.registry.credentials_file = creds;
  // Progress of a long import (at most a line a second), shown from one node only.
  const bool show_progress = st.first_node;
  const std::string save = st.options.save_path;
  auto work = [ref = *ref, opts, show_progress, save](
                  const std::function<void(std::string_view)>& progress) mutable {
    if (show_progress) opts.progress = progress;
    // A failed mirror is said from every node: each asks it on its own.
    opts.registry.warn = [progress](const std::string& line) { progress(line); };
    launcher::choose_squashfs_mount(opts, save);  // as the user: can they open /dev/fuse?
    return launcher::import_image(ref, opts);
  };
  auto image = import_as_user(ids, st.cache_dir, work, [](std::string_view line) {
    slurm_spank_log("slipway: %.*s", static_cast<int>(line.size()), line.data());
  });
  if (!image.ok()) return launcher::import_failed(st.options.container_image, image.status());
  return image;
}


launcher::Status setup_step(spank_t sp, PluginState& st) {
  SLIPWAY_TRY(prepare_named_container(st));
  launcher::StepInput in;
  in.options = st.options;
  in.site = site_defaults(st.config);
  in.fabric = st.config.fabric;
  in.plan.cache_dir = st.cache_dir;
  in.plan.uid = st.ids->uid;
  in.plan.gid = st.ids->gid;
  in.plan.home = launcher::job_home(job_getenv(sp, "HOME"), st.ids->uid);
  in.plan.named_dir = st.named_dir;
  in.plan.node = node_name();
  // A running or named container's image; else imported once per node, as the user.
  if (st.running) {
    in.recorded_image = st.running->image;
  } else if (st.named_exists) {
    auto digest = named_container_image(st);
    SLIPWAY_TRY(digest);
    in.recorded_image = *digest;
  }
  in.import = [&] { return import_for(sp, *st.ids); };
  auto step = launcher::prepare_step(in);
  SLIPWAY_TRY(step);
  st.step = std::move(*step);
  return start_node_container(sp, st);
}

// --container-save: the node's tasks count themselves down in memory they share with slurmstepd
// (it forks them after this), and the last one saves (remote_task.cc).
launcher::Status count_tasks_for_save(spank_t sp, PluginState& st) {
  uint32_t tasks = 0;
  if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &tasks) != ESPANK_SUCCESS || tasks == 0)
    return launcher::Status::error("--container-save: cannot read the node's task count", EINVAL);
  void* shared = mmap(nullptr, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return launcher::Status::from_errno("--container-save: mmap", errno);
  st.tasks_running = static_cast<int*>(shared);
  *st.tasks_running = static_cast<int>(tasks);
  return launcher::Status();
}

}  // namespace

int remote_user_init(spank_t sp) {
  // slurmstepd's other threads (its PMIx server authenticating peers through munge) must not act
  // as the job user while we work here (import_child.h).
  OnlyThisThreadIsTheUser identity;
  PluginState& st = state();
  load_remote_options(sp, client_cwd(sp));
  if (!st.deferred_error.empty() || !st.options.wants_container()) return 0;
  auto ids = step_ids(sp);
  if (!ids) {
    st.deferred_error = "cannot read the job's ids from slurmstepd";
    return 0;
  }
  const bool batch = ids->step_id == SLURM_BATCH_SCRIPT;
  if (!(ids->is_user_step() || (batch && st.config.sbatch_support))) return 0;
  st.ids = ids;
  uint32_t node_id = 1;
  st.first_node = spank_get_item(sp, S_JOB_NODEID, &node_id) == ESPANK_SUCCESS && node_id == 0;
  st.cache_dir = cache_dir_for(st.config, ids->uid);
  if (st.config.cache_dir.empty()) {
    // The default /var/tmp/slipway-<uid> is made by root for the user: another user who made
    // that name first cannot block or feed this user's imports (launcher/image/cache.h).
    EuidRoot root;
    auto claimed = launcher::claim_user_cache("/var/tmp", ids->uid, ids->gid);
    if (!claimed.ok()) log_error("cannot make the image cache: " + claimed.status().message());
    else if (!claimed->empty()) log_info(*claimed);
  }
  auto status = setup_step(sp, st);
  if (status.ok() && st.first_node && !st.options.save_path.empty()) {
    status = launcher::check_save_target(st.options.save_path);
    if (status.ok()) status = count_tasks_for_save(sp, st);
  }
  if (!status.ok()) {
    // Raised (once per node) by task_init: an error logged here would reach srun twice. The call
    // site of a failed system call goes to the node's log only.
    if (!status.where().empty()) log_verbose("(" + status.message() + ": at " + status.where() + ")");
    st.step.reset();
    st.deferred_error = status.message();
    return 0;
  }
  log_info("step " + std::to_string(ids->job_id) + "." + std::to_string(ids->step_id) + ": image " +
           st.step->image.manifest_digest +
           (!st.step->image.squashfs.empty() ? " (mounted)"
            : st.step->image.was_cached      ? " (cached)"
                                        : " (imported)") +
           (st.named_dir.empty() ? "" : ", container '" + st.options.container_name + "'") +
           ", holder " + std::to_string(st.holder.pid()));
  return 0;
}

}  // namespace slipway::spank
