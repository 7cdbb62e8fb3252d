// The node's container for one step (slurmstepd, user_init and exit): the Slurm side of the
// container plan (launcher/options/container_plan.h) and of the holder that keeps the container
// for the step's tasks. Named containers live under <runtime>/job-<id>/NAME (container_scope=job,
// removed by the job epilog) or <runtime>/global/NAME (container_scope=global).
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dl_hooks.h"
#include "log.h"
#include "options/container_plan.h"
#include "plugin_state.h"

namespace slipway::spank {
namespace {

std::string runtime_root(const PluginState& st, uid_t uid) {
  if (st.config.runtime_dir.empty()) return st.cache_dir + "/containers";
  return st.config.runtime_dir + "/" + std::to_string(uid);
}

std::string job_scope_dir(const PluginState& st, uid_t uid, uint32_t job_id) {
  return runtime_root(st, uid) + "/job-" + std::to_string(job_id);
}

std::string node_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

launcher::SiteDefaults site_defaults(const PluginConfig& cfg) {
  return {.mount_home = cfg.mount_home, .remap_root = cfg.remap_root, .mounts = cfg.mounts};
}

}  // namespace

std::string cache_dir_for(const PluginConfig& cfg, uid_t uid) {
  if (cfg.cache_dir.empty()) return launcher::default_cache_dir(uid);
  // A site-wide root still gets one directory per user unless the admin shares it on purpose.
  return cfg.cache_dir + "/" + std::to_string(uid);
}

Status prepare_named_container(PluginState& st) {
  if (st.options.container_name.empty()) return Status();
  const StepIds& ids = *st.ids;
  const std::string scope = st.config.container_scope == ContainerScope::kGlobal
                                ? runtime_root(st, ids.uid) + "/global"
                                : job_scope_dir(st, ids.uid, ids.job_id);
  auto nc = launcher::open_named_container(st.options, scope, node_name());
  SLIPWAY_TRY(nc);
  st.named_dir = nc->dir;
  st.named_exists = nc->exists;
  st.named_lock = std::move(nc->lock);
  return Status();
}

Result<std::string> named_container_image(const PluginState& st) {
  return launcher::named_container_image(st.named_dir, st.options.container_name);
}

Status start_node_container(spank_t sp, PluginState& st) {
  const launcher::PlanInput in{.rootfs = st.image->rootfs, .cache_dir = st.cache_dir,
                               .uid = st.ids->uid, .gid = st.ids->gid,
                               .home = home_of(st.ids->uid), .named_dir = st.named_dir,
                               .node = node_name()};
  auto spec = launcher::plan_container(st.options, site_defaults(st.config), in);
  SLIPWAY_TRY(spec);
  SLIPWAY_TRY(prepare_dl_node(sp, st, *spec));
  if (!st.named_dir.empty() && !st.named_exists)
    SLIPWAY_TRY(launcher::record_named_container_image(st.named_dir, st.image->manifest_digest));
  auto holder = launcher::start_holder(*spec);
  if (!holder.ok())
    return holder.status().context("cannot start the container of image '" +
                                   st.options.container_image + "'");
  st.spec = std::move(*spec);
  st.holder = std::move(*holder);
  return Status();
}

void finish_node_container(PluginState& st) {
  st.holder.stop();
  st.named_lock.reset();
  st.image_in_use.reset();
}

// Job epilog (root, in a slurmstepd that slurmd started): remove the job's named containers on this
// node. The removal runs in a child that has become the job user: never touch user paths as root.
int remote_job_epilog(spank_t sp) {
  auto ids = step_ids(sp);
  if (!ids) return 0;
  PluginState& st = state();
  st.cache_dir = cache_dir_for(st.config, ids->uid);
  const std::string dir = job_scope_dir(st, ids->uid, ids->job_id);
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    if (setgroups(1, &ids->gid) != 0 || setresgid(ids->gid, ids->gid, ids->gid) != 0 ||
        setresuid(ids->uid, ids->uid, ids->uid) != 0)
      _exit(1);
    _exit(launcher::remove_dir_tree(dir).ok() ? 0 : 2);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    log_error("job " + std::to_string(ids->job_id) + ": could not remove " + dir);
  return 0;
}

}  // namespace slipway::spank
