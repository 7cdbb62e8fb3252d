// The node's container for one step (slurmstepd, user_init and exit): which image or named
// container, what is bound in, which namespaces, and the holder that keeps it for the step's tasks
// (launcher/runtime/container.h). Named containers (--container-name) keep their overlay's upper
// layer on node-local disk, under <runtime>/job-<id>/NAME (container_scope=job, removed by the job
// epilog) or <runtime>/global/NAME (container_scope=global), one step at a time.
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "dl_hooks.h"
#include "image/fs_beneath.h"
#include "log.h"
#include "plugin_state.h"

namespace slipway::spank {
namespace {

using launcher::Status;

std::string runtime_root(const PluginState& st, uid_t uid) {
  if (st.config.runtime_dir.empty()) return st.cache_dir + "/containers";
  return st.config.runtime_dir + "/" + std::to_string(uid);
}

std::string job_scope_dir(const PluginState& st, uid_t uid, uint32_t job_id) {
  return runtime_root(st, uid) + "/job-" + std::to_string(job_id);
}

Status make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    std::string p = path.substr(0, i);
    if (mkdir(p.c_str(), 0700) == -1 && errno != EEXIST) return Status::from_errno("mkdir " + p, errno);
  }
  return Status();
}

Status remove_dir(const std::string& path) {
  size_t slash = path.rfind('/');
  launcher::UniqueFd parent(open(path.substr(0, slash).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent.valid()) return errno == ENOENT ? Status() : Status::from_errno("open " + path, errno);
  return launcher::remove_tree_at(parent.get(), path.c_str() + slash + 1);
}

std::string node_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

bool is_dir(const std::string& p) {
  struct stat s;
  return stat(p.c_str(), &s) == 0 && S_ISDIR(s.st_mode);
}

// --container-mounts, the site's `mounts`, and the home directory, as binds. A missing source is an
// error naming the option (srun checked it already where the file system is shared).
Status add_mounts(const PluginState& st, launcher::LaunchSpec& spec) {
  std::vector<MountSpec> all;
  if (!st.config.mounts.empty()) {
    auto site = parse_mounts(st.config.mounts, "/");
    if (!site.ok()) return site.status();
    all = *site;
  }
  all.insert(all.end(), st.options.mounts.begin(), st.options.mounts.end());
  for (const auto& m : all) {
    struct stat s;
    if (stat(m.source.c_str(), &s) != 0)
      return Status::error("--container-mounts: source '" + m.source + "' does not exist on " +
                               node_name() + "; create it or fix the path",
                           ENOENT);
    spec.binds.push_back({.source = m.source, .destination = m.destination,
                          .read_only = m.read_only, .recursive = m.recursive});
  }
  return Status();
}

Status node_spec(const PluginState& st, launcher::LaunchSpec& spec) {
  const StepIds& ids = *st.ids;
  spec.rootfs = st.image->rootfs;
  spec.scratch_dir = st.cache_dir + "/mnt";
  spec.uid = ids.uid;
  spec.gid = ids.gid;
  spec.remap_root = st.options.remap_root.value_or(st.config.remap_root);
  const bool named = !st.named_dir.empty();
  spec.writable = st.options.writable.value_or(named);  // a named container is meant to change
  if (named) spec.persistent_dir = st.named_dir;
  spec.unshare_net = st.options.unshare.net;
  spec.unshare_ipc = st.options.unshare.ipc;
  spec.unshare_uts = st.options.unshare.uts;
  if (st.options.mount_home.value_or(st.config.mount_home)) {
    std::string home = home_of(ids.uid);
    if (!home.empty() && is_dir(home)) spec.binds.push_back({.source = home, .destination = home});
  }
  SLIPWAY_TRY(add_mounts(st, spec));
  // With root remapped inside, PMIx can only authenticate through munge (platform.md).
  if (spec.remap_root && is_dir("/run/munge"))
    spec.binds.push_back({.source = "/run/munge", .destination = "/run/munge"});
  spec.host_files = {"/etc/hosts", "/etc/resolv.conf"};
  return Status();
}

Status write_file_atomically(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << data;
    if (!out) return Status::from_errno("write " + tmp, errno);
  }
  SLIPWAY_SYS(rename(tmp.c_str(), path.c_str()), "rename " + tmp);
  return Status();
}

}  // namespace

std::string cache_dir_for(const PluginConfig& cfg, uid_t uid) {
  if (cfg.cache_dir.empty()) return launcher::default_cache_dir(uid);
  // A site-wide root still gets one directory per user unless the admin shares it on purpose.
  return cfg.cache_dir + "/" + std::to_string(uid);
}

Status prepare_named_container(PluginState& st) {
  const JobOptions& o = st.options;
  if (o.container_name.empty()) return Status();
  const StepIds& ids = *st.ids;
  const std::string scope = st.config.container_scope == ContainerScope::kGlobal
                                ? runtime_root(st, ids.uid) + "/global"
                                : job_scope_dir(st, ids.uid, ids.job_id);
  SLIPWAY_TRY(make_dirs(scope));
  const std::string dir = scope + "/" + o.container_name;
  auto lock = launcher::FileLock::acquire(dir + ".lock", launcher::FileLock::Mode::kExclusive,
                                          /*wait=*/false);
  if (!lock.ok())
    return Status::error("container '" + o.container_name + "' is in use by another step on " +
                             node_name() + "; wait for that step or use another --container-name",
                         EBUSY);
  st.named_lock = std::move(*lock);
  bool exists = access((dir + "/image").c_str(), R_OK) == 0;
  if (o.name_mode == NameMode::kCreate && exists) {
    SLIPWAY_TRY(remove_dir(dir));
    exists = false;
  }
  if (o.name_mode == NameMode::kExec && !exists)
    return Status::error("container '" + o.container_name + "' does not exist on " + node_name() +
                             "; create it first with --container-name=" + o.container_name +
                             " --container-image=IMAGE",
                         ENOENT);
  if (!exists && o.container_image.empty())
    return Status::error("container '" + o.container_name + "' does not exist on " + node_name() +
                             "; give --container-image to create it",
                         ENOENT);
  st.named_dir = dir;
  st.named_exists = exists;
  return Status();
}

// The image a named container was made from, read back from its directory.
Result<std::string> named_container_image(const PluginState& st) {
  std::ifstream in(st.named_dir + "/image");
  std::string digest;
  if (!std::getline(in, digest) || digest.empty())
    return Status::error("container '" + st.options.container_name + "' is damaged (no image "
                         "record); recreate it with --container-name=" +
                             st.options.container_name + ":create",
                         EIO);
  return digest;
}

Status start_node_container(spank_t sp, PluginState& st) {
  launcher::LaunchSpec spec;
  SLIPWAY_TRY(node_spec(st, spec));
  SLIPWAY_TRY(prepare_dl_node(sp, st, spec));
  if (!st.named_dir.empty()) {
    SLIPWAY_TRY(make_dirs(st.named_dir));
    if (!st.named_exists)
      SLIPWAY_TRY(write_file_atomically(st.named_dir + "/image", st.image->manifest_digest + "\n"));
  }
  auto holder = launcher::start_holder(spec);
  if (!holder.ok())
    return holder.status().context("cannot start the container of image '" +
                                   st.options.container_image + "'");
  st.spec = std::move(spec);
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
    _exit(remove_dir(dir).ok() ? 0 : 2);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    log_error("job " + std::to_string(ids->job_id) + ": could not remove " + dir);
  return 0;
}

}  // namespace slipway::spank
