// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The node's container for one step (slurmstepd, user_init and exit): the Slurm side of the
// container plan (launcher/options/container_plan.h) and of the holder that keeps the container
// for the step's tasks. Named containers live under <runtime>/job-<id>/NAME (container_scope=job,
// removed by the job epilog) or <runtime>/global/NAME (container_scope=global).
#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "common/child.h"
#include "dl_doctor.h"
#include "dl_hooks.h"
#include "import_child.h"
#include "log.h"
#include "options/container_plan.h"
#include "options/entrypoint.h"
#include "plugin_state.h"
#include "runtime/run_in.h"

namespace slipway::spank {
namespace {

std::string runtime_root(const PluginState& st, uid_t uid) {
  // Containers (their writable layers, the records of running ones) are the node's own: with a
  // site cache_dir= that every node may see, they stay in the node-local default cache instead.
  if (st.config.runtime_dir.empty())
    return (st.config.cache_dir.empty() ? st.cache_dir : launcher::default_cache_dir(uid)) +
           "/containers";
  return st.config.runtime_dir + "/" + std::to_string(uid);
}

std::string job_scope_dir(const PluginState& st, uid_t uid, uint32_t job_id) {
  return runtime_root(st, uid) + "/job-" + std::to_string(job_id);
}

// --container-entrypoint: the image's entrypoint runs once per node, in the container, before the
// tasks (options/entrypoint.h), with the image's Env and the --container-env names of the job's.
Status run_entrypoint(spank_t sp, PluginState& st) {
  if (!launcher::wants_entrypoint(*st.step, st.options, st.config.execute_entrypoint)) return Status();
  std::vector<std::string> job_env;
  char** env = nullptr;
  if (spank_get_item(sp, S_JOB_ENV, &env) == ESPANK_SUCCESS && env)
    for (char** e = env; *e; ++e) job_env.emplace_back(*e);
  auto r = [&] {
    EuidRoot root;  // the entrypoint's child becomes the user; slurmstepd stays root meanwhile
    return launcher::step_entrypoint(st.holder, *st.step, st.options, job_env);
  }();
  SLIPWAY_TRY(r);
  st.entrypoint_output = std::move(r->output);
  st.entrypoint_env = std::move(r->exported);
  return Status();
}

}  // namespace

std::string node_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

launcher::SiteDefaults site_defaults(const PluginConfig& cfg) {
  return {.mount_home = cfg.mount_home, .remap_root = cfg.remap_root, .writable = cfg.writable,
          .mounts = cfg.mounts};
}

std::string cache_dir_for(const PluginConfig& cfg, uid_t uid) {
  if (cfg.cache_dir.empty()) return launcher::default_cache_dir(uid);
  // A site-wide root still gets one directory per user unless the admin shares it on purpose.
  return cfg.cache_dir + "/" + std::to_string(uid);
}

// A step's container is reachable by later steps of the job (srun --overlap): a named one under
// its name, an unnamed one as <job>.<step>, as in pyxis (options/container_instances.h). A name
// that some step's container runs under is found in the job's scope first.
Status prepare_named_container(PluginState& st) {
  const StepIds& ids = *st.ids;
  const std::string job_scope = job_scope_dir(st, ids.uid, ids.job_id);
  if (st.options.container_name.empty()) {
    SLIPWAY_TRY(launcher::make_private_dirs(job_scope));
    st.instances_dir = launcher::instance_dir(
        job_scope, std::to_string(ids.job_id) + "." + std::to_string(ids.step_id));
    return Status();
  }
  std::string scope = st.config.container_scope == ContainerScope::kGlobal
                          ? runtime_root(st, ids.uid) + "/global"
                          : job_scope;
  if (scope != job_scope &&
      !launcher::live_instances(launcher::instance_dir(job_scope, st.options.container_name)).empty())
    scope = job_scope;
  auto nc = launcher::open_named_container(st.options, scope, node_name());
  SLIPWAY_TRY(nc);
  st.named_dir = nc->dir;
  st.named_exists = nc->exists;
  st.named_lock = std::move(nc->lock);
  st.running = nc->running;
  st.instances_dir = launcher::instance_dir(scope, st.options.container_name);
  return Status();
}

Result<std::string> named_container_image(const PluginState& st) {
  return launcher::named_container_image(st.named_dir, st.options.container_name);
}

namespace {

// This step's holder: a new container, or, when one runs under the name, a holder that joins it
// (auto, exec) or a new instance of its root (no_exec), as in pyxis. An instance whose step ends
// while we join it is passed over for the next live one, or for a fresh start where the mode
// allows one. SPEC is what the holder runs (a joined container's settings are the instance's).
Result<launcher::ContainerHolder> start_step_holder(PluginState& st, launcher::LaunchSpec& spec,
                                                   bool& joined) {
  const launcher::LaunchSpec planned = spec;
  const std::string& name = st.options.container_name;
  for (int attempt = 0;; ++attempt) {
    spec = planned;
    launcher::HolderOptions how;
    joined = st.running && st.options.name_mode != NameMode::kNoExec;
    if (joined) {
      // The running container as it is: its root, mounts and namespaces (pyxis attaches).
      SLIPWAY_TRY(launcher::take_instance_settings(*st.running, name, node_name(), spec));
      how.join = st.running->pid;
    } else if (st.running) {
      if (st.running->remap_root != spec.remap_root)
        return Status::error("container '" + name + "' runs " +
                                 (st.running->remap_root ? "with" : "without") +
                                 " --container-remap-root on " + node_name() +
                                 "; a new instance of it must too: give the same option",
                             EINVAL);
      how.adopt = st.running->pid;
    }
    // The holder becomes the user itself; slurmstepd's own threads stay root meanwhile.
    auto holder = [&] {
      EuidRoot root;
      return launcher::start_holder(spec, how);
    }();
    if (holder.ok()) return holder;
    // The instance we joined may have gone meanwhile (a zombie too has no namespaces left).
    std::vector<launcher::Instance> live;
    if (st.running && attempt < 8) live = launcher::live_instances(st.instances_dir);
    const bool vanished = st.running && attempt < 8 &&
                          std::none_of(live.begin(), live.end(),
                                       [&](const auto& i) { return i.pid == st.running->pid; });
    if (!vanished)
      return Status::error("cannot start " +
                               (st.options.container_image.empty()
                                    ? "container '" + name + "'"
                                    : "the container of image '" + st.options.container_image + "'") +
                               ": " + holder.status().message() + diagnosis_for(holder.status(), st),
                           holder.status().error_number());
    st.running.reset();
    if (!live.empty()) st.running = live.front();
    if (!st.running && (st.options.name_mode == NameMode::kExec || !st.named_exists))
      return Status::error("container '" + name + "' stopped running on " + node_name() +
                               " while this step was joining it; start it again",
                           ESRCH);
  }
}

}  // namespace

Status start_node_container(spank_t sp, PluginState& st) {
  launcher::LaunchSpec& spec = st.step->spec;
  SLIPWAY_TRY(prepare_dl_node(sp, st, spec));
  // Every container gets the filter, as with pyxis (runtime/seccomp.h). Compiled here, in
  // slurmstepd itself: tasks are forked from a threaded process and then enter the container,
  // where neither dlopen(3) nor the host's libseccomp should be used.
  auto filter = launcher::compile_fake_root_filter();
  SLIPWAY_TRY(filter);
  st.seccomp = std::move(*filter);
  bool joined = false;
  auto holder = start_step_holder(st, spec, joined);
  SLIPWAY_TRY(holder);
  st.holder = std::move(*holder);
  SLIPWAY_TRY(launcher::record_instance(st.instances_dir, st.holder.pid(), spec,
                                        st.step->image.manifest_digest));
  st.named_lock.reset();  // recorded: later steps may join or copy it now
  // As pyxis: a joined container keeps its mounts (its tasks may be using them).
  if (joined && !st.options.mounts.empty())
    log_user("ignoring --container-mounts when attaching to a running container ('" +
             st.options.container_name + "' on " + node_name() +
             "): its mounts stay as the step that started it made them");
  // A container already running has had its entrypoint.
  return joined ? Status() : run_entrypoint(sp, st);
}

void finish_node_container(PluginState& st) {
  st.holder.stop();
  st.named_lock.reset();
  st.step.reset();  // the image is no longer in use
}

// Job epilog (root, in a slurmstepd that slurmd started): remove the job's named containers on this
// node. The removal runs in a child that has become the job user: never touch user paths as root.
int remote_job_epilog(spank_t sp) {
  // The prolog/epilog context answers only S_JOB_UID and S_JOB_ID (Slurm's
  // _check_spank_item_validity); the group comes from the password database.
  StepIds job;
  if (spank_get_item(sp, S_JOB_UID, &job.uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_ID, &job.job_id) != ESPANK_SUCCESS)
    return 0;
  struct passwd pw, *res = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(job.uid, &pw, buf.data(), buf.size(), &res) != 0 || !res) return 0;
  job.gid = res->pw_gid;
  const StepIds* ids = &job;
  PluginState& st = state();
  st.cache_dir = cache_dir_for(st.config, ids->uid);
  const std::string dir = job_scope_dir(st, ids->uid, ids->job_id);
  auto removal = launcher::spawn({.uid = ids->uid, .gid = ids->gid}, [&](int) {
    return launcher::remove_dir_tree(dir).ok() ? 0 : 2;
  });
  if (!removal.ok() || !removal->wait().ok())
    log_error("job " + std::to_string(ids->job_id) + ": could not remove " + dir);
  return 0;
}

}  // namespace slipway::spank
