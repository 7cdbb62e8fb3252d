// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The container plan (see container_plan.h): options and site defaults to a LaunchSpec, and named
// containers' directories, locks and image records.
#include "options/container_plan.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "common/file_util.h"
#include "image/fs_beneath.h"
#include "options/save.h"
#include "runtime/squashfs_mount.h"

namespace slipway::launcher {
namespace {

// --container-mounts and the site's `mounts` as binds; a missing source names the option.
Status add_mounts(const JobOptions& opts, const SiteDefaults& site, const std::string& node,
                  LaunchSpec& spec) {
  std::vector<MountSpec> all;
  if (!site.mounts.empty()) {
    auto parsed = parse_mounts(site.mounts, "/");
    SLIPWAY_TRY(parsed);
    all = *parsed;
  }
  all.insert(all.end(), opts.mounts.begin(), opts.mounts.end());
  for (const auto& m : all) {
    struct stat s;
    if (m.is_bind() && stat(m.source.c_str(), &s) != 0 && errno != ENOENT)  // there, unreachable
      return Status::error("--container-mounts: source path '" + m.source + "' cannot be reached on " +
                               node + ": " + strerror(errno) + "; the job's user (uid " +
                               std::to_string(geteuid()) + ") must be able to reach it",
                           errno);
    if (m.is_bind() && stat(m.source.c_str(), &s) != 0)
      return Status::error(mount_source_missing(m.source) + " on " + node +
                               "; create it or fix the path",
                           ENOENT);
    spec.binds.push_back({.source = m.source, .destination = m.destination,
                          .read_only = m.read_only, .recursive = m.recursive,
                          .no_exec = m.no_exec, .unbindable = m.unbindable,
                          .tmpfs_options = m.tmpfs_options,
                          .tmpfs = m.kind == MountSpec::Kind::kTmpfs,
                          .detach = m.kind == MountSpec::Kind::kUmount});
  }
  return Status();
}

}  // namespace

Result<LaunchSpec> plan_container(const JobOptions& opts, const SiteDefaults& site,
                                  const PlanInput& in) {
  LaunchSpec spec;
  spec.rootfs = in.rootfs;
  spec.squashfs_file = in.squashfs_file;
  spec.scratch_dir = in.cache_dir + "/mnt";
  spec.uid = in.uid;
  spec.gid = in.gid;
  spec.remap_root = opts.remap_root.value_or(site.remap_root);
  const bool named = !in.named_dir.empty();
  spec.writable = opts.writable.value_or(named || site.writable);  // a named one is meant to change
  if (named) spec.persistent_dir = in.named_dir;
  spec.unshare_net = opts.unshare.net;
  spec.unshare_ipc = opts.unshare.ipc;
  spec.unshare_uts = opts.unshare.uts;
  // As pyxis: root's home inside is root's, so with root remapped the user's home is bound there.
  // A HOME that is no directory fails the step, as enroot's bind of it does.
  if (opts.mount_home.value_or(site.mount_home) && !in.home.empty()) {
    if (in.home[0] != '/' || !is_dir(in.home))
      return Status::error("--container-mount-home: HOME='" + in.home + "' is not " +
                               (in.home[0] == '/' ? "a directory" : "an absolute path") + " on " +
                               in.node + "; set HOME to your home directory, or give "
                               "--no-container-mount-home",
                           ENOTDIR);
    spec.binds.push_back({.source = in.home,
                          .destination = spec.remap_root ? kRemappedHome : in.home});
  }
  SLIPWAY_TRY(add_mounts(opts, site, in.node, spec));
  // With root remapped inside, PMIx can only authenticate through munge (docs/platform.md, "PMIx").
  if (spec.remap_root && is_dir("/run/munge"))
    spec.binds.push_back({.source = "/run/munge", .destination = "/run/munge"});
  spec.host_files = {"/etc/hosts", "/etc/resolv.conf"};
  // apt drops to its _apt user to download and then checks that it did: with set*id calls as
  // no-ops (runtime/seccomp.h) that check fails ("Could not switch group"), so apt keeps root
  // instead, as enroot's apt hook has it. Written only where the image has apt's directory.
  if (spec.remap_root)
    spec.files.push_back({.path = "/etc/apt/apt.conf.d/99slipway-remap-root",
                          .content = "// slipway --container-remap-root: set*id calls are no-ops "
                                     "here, so apt cannot drop to _apt\n"
                                     "APT::Sandbox::User \"root\";\n"});
  return spec;
}

void add_working_directory(const JobOptions& opts, const std::string& image_workdir,
                           TaskView& view) {
  // As pyxis (enroot's /etc/rc: cd "${WORKDIR:-/}"): the option, else the image's WorkingDir,
  // else the container's root; never the directory srun ran in, which the container need not have.
  const bool image_has_one = !image_workdir.empty() && image_workdir[0] == '/';
  view.workdir = !opts.workdir.empty() ? opts.workdir
                 : image_has_one       ? image_workdir
                                       : std::string("/");
}

bool image_may_set(const JobOptions& opts, const std::string& name, bool job_has_it) {
  for (const char* p : {"SLURM_", "PMIX_", "PMI_", "OMPI_", "SLIPWAY_"})
    if (name.rfind(p, 0) == 0) return false;
  for (const auto& keep : opts.env_names)
    if (keep == name) return !job_has_it;
  return true;
}

std::vector<std::pair<std::string, std::string>> image_settings(
    const JobOptions& opts, const std::vector<std::string>& image_env,
    const std::vector<std::string>& exported,
    const std::function<bool(const std::string&)>& job_has) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto* vars : {&image_env, &exported})
    for (const auto& kv : *vars) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) continue;
      std::string name = kv.substr(0, eq);
      if (image_may_set(opts, name, job_has(name))) out.emplace_back(std::move(name), kv.substr(eq + 1));
    }
  return out;
}

std::string job_home(const std::optional<std::string>& home_env, uid_t uid) {
  if (home_env && !home_env->empty()) return *home_env;
  struct passwd pw, *res = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) != 0 || !res || !res->pw_dir) return "";
  return res->pw_dir;
}

std::string container_home(const LaunchSpec& spec, const std::string& home) {
  if (home.empty()) return "";
  for (const auto& b : spec.binds)
    if (b.source == home && (b.destination == kRemappedHome || b.destination == home))
      return b.destination;
  return "";
}

Status make_private_dirs(const std::string& path) { return make_dirs(path, 0700); }

Status remove_dir_tree(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return Status::error("not an absolute path: " + path, EINVAL);
  UniqueFd parent(open(slash == 0 ? "/" : path.substr(0, slash).c_str(),
                       O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent.valid()) return errno == ENOENT ? Status() : Status::from_errno("open " + path, errno);
  Status st = remove_tree_at(parent.get(), path.c_str() + slash + 1);
  return st.ok() || st.error_number() == ENOENT ? Status() : st;
}

namespace {

// NAME's lock, exclusively; another step holds it only while it starts or joins the container.
Result<FileLock> lock_named(const std::string& path, const std::string& name,
                            const std::string& node, int wait_s) {
  for (int waited_ms = 0;; waited_ms += 50) {
    auto lock = FileLock::acquire(path, FileLock::Mode::kExclusive, /*wait=*/false);
    if (lock.ok() || lock.status().error_number() != EWOULDBLOCK) return lock;
    if (waited_ms >= wait_s * 1000)
      return Status::error("container '" + name + "' is in use by another step on " + node +
                               "; wait for that step or use another --container-name",
                           EBUSY);
    usleep(50 * 1000);
  }
}

}  // namespace

Result<NamedContainer> open_named_container(const JobOptions& o, const std::string& scope_dir,
                                            const std::string& node, int wait_s) {
  SLIPWAY_TRY(make_private_dirs(scope_dir));
  NamedContainer nc;
  const std::string& name = o.container_name;
  nc.dir = scope_dir + "/" + name;
  auto lock = lock_named(nc.dir + ".lock", name, node, wait_s);
  SLIPWAY_TRY(lock);
  nc.lock = std::move(*lock);
  nc.exists = access((nc.dir + "/image").c_str(), R_OK) == 0;
  if (auto live = live_instances(instance_dir(scope_dir, name)); !live.empty())
    nc.running = live.front();
  if (o.name_mode == NameMode::kCreate && (nc.exists || nc.running))
    return Status::error("container '" + name + "' already exists on " + node +
                             "; use --container-name=" + name + " to use it, or another name",
                         EEXIST);
  if (o.name_mode == NameMode::kExec && !nc.running)
    return Status::error("container '" + name + "' is not running on " + node +
                             " (exec attaches to a running container); start it in another step "
                             "first, or use --container-name=" + name,
                         ENOENT);
  if (!nc.exists && !nc.running && o.container_image.empty())
    return Status::error("container '" + name + "' does not exist on " + node +
                             "; create it first with --container-name=" + name +
                             " --container-image=IMAGE",
                         ENOENT);
  if (!nc.exists && !nc.running) SLIPWAY_TRY(make_private_dirs(nc.dir));
  return nc;
}

void choose_squashfs_mount(ImportOptions& opts, const std::string& save_path) {
  if (!save_path.empty() && !is_squashfs_path(save_path)) {
    opts.mount_squashfs = false;
    opts.why_not_mount = "--container-save=" + save_path + " writes an OCI archive, which needs "
                         "the image's layers";
    return;
  }
  opts.why_not_mount = squashfs_mount_unavailable();
  opts.mount_squashfs = opts.why_not_mount.empty();
}

Result<std::string> named_container_image(const std::string& dir, const std::string& name) {
  std::ifstream in(dir + "/image");
  std::string digest;
  if (!std::getline(in, digest) || digest.empty())
    return Status::error("container '" + name + "' is damaged (no image record); recreate it "
                         "with --container-name=" + name + ":create",
                         EIO);
  return digest;
}

Status record_named_container_image(const std::string& dir, const std::string& digest) {
  return write_file_atomic(dir + "/image", digest + "\n");
}

}  // namespace slipway::launcher
