// user_init on each node (slurmstepd, effective uid already the job user): import the step's image
// into the node cache once, then start the node's container holder, which the step's tasks join in
// task_init; or remember why not. Errors are kept for task_init because Slurm does not report
// user_init failures to srun (bug 7573).
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "image/image_ref.h"
#include "dl_hooks.h"
#include "log.h"
#include "plugin_state.h"
#include "remote_env.h"

namespace slipway::spank {
namespace {

std::string home_of(uid_t uid) {
  struct passwd pw, *res = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) != 0 || !res || !res->pw_dir) return "";
  return res->pw_dir;
}

std::string cache_dir_for(const PluginConfig& cfg, uid_t uid) {
  if (cfg.cache_dir.empty()) return launcher::default_cache_dir(uid);
  // A site-wide root still gets one directory per user unless the admin shares it on purpose.
  return cfg.cache_dir + "/" + std::to_string(uid);
}

launcher::Result<launcher::ImportedImage> import_for(spank_t sp, const StepIds& ids) {
  PluginState& st = state();
  launcher::RefDefaults defaults;
  defaults.default_registry = st.config.default_registry;
  if (auto pwd = job_getenv(sp, "PWD")) defaults.cwd = *pwd;
  auto ref = launcher::parse_image_ref(st.options.container_image, defaults);
  SLIPWAY_TRY(ref);
  auto pinned_ref = job_getenv(sp, kEnvImageRef);
  auto pinned_digest = job_getenv(sp, kEnvImageDigest);
  if (ref->digest.empty() && pinned_ref && pinned_digest && *pinned_ref == ref->str())
    ref->digest = *pinned_digest;

  launcher::ImportOptions opts;
  opts.cache_dir = st.cache_dir;
  opts.registry.insecure_registries = st.config.insecure_registries;
  opts.registry.ca_file = st.config.ca_file;
  std::string creds = home_of(ids.uid) + "/.config/slipway/credentials";
  if (access(creds.c_str(), R_OK) == 0) opts.registry.credentials_file = creds;
  return launcher::import_image(*ref, opts);
}

// The part of the container that every task of the node shares.
launcher::LaunchSpec node_spec(const StepIds& ids, const launcher::ImportedImage& image,
                               const std::string& cache_dir) {
  launcher::LaunchSpec spec;
  spec.rootfs = image.rootfs;
  spec.scratch_dir = cache_dir + "/mnt";
  spec.uid = ids.uid;
  spec.gid = ids.gid;
  const std::string home = home_of(ids.uid);
  struct stat st;
  if (!home.empty() && stat(home.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    spec.binds.push_back({.source = home, .destination = home});
  spec.host_files = {"/etc/hosts", "/etc/resolv.conf"};
  return spec;
}

}  // namespace

int remote_user_init(spank_t sp) {
  PluginState& st = state();
  load_remote_options(sp);
  if (st.options.container_image.empty()) return 0;
  auto ids = step_ids(sp);
  if (!ids) {
    st.deferred_error = "cannot read the job's ids from slurmstepd";
    return 0;
  }
  if (!ids->is_user_step()) return 0;
  st.cache_dir = cache_dir_for(st.config, ids->uid);
  auto image = import_for(sp, *ids);
  if (!image.ok()) {
    st.deferred_error = image.status().message();
    log_error(st.deferred_error);
    return 0;
  }
  // The per-task private mount point of the container root (see LaunchSpec::scratch_dir).
  std::string mnt = st.cache_dir + "/mnt";
  if (mkdir(mnt.c_str(), 0700) != 0 && errno != EEXIST) {
    st.deferred_error = "cannot create " + mnt + ": " + strerror(errno);
    return 0;
  }
  st.spec = node_spec(*ids, *image, st.cache_dir);
  if (auto dl = prepare_dl_node(sp, st, st.spec); !dl.ok()) {
    st.deferred_error = dl.message();
    return 0;
  }
  auto holder = launcher::start_holder(st.spec);
  if (!holder.ok()) {
    st.deferred_error = "cannot start the container of image '" + st.options.container_image +
                        "': " + holder.status().message();
    log_error(st.deferred_error);
    return 0;
  }
  st.holder = std::move(*holder);
  log_info("step " + std::to_string(ids->job_id) + "." + std::to_string(ids->step_id) +
              ": image " + image->manifest_digest + (image->was_cached ? " (cached)" : " (imported)") +
              ", container holder " + std::to_string(st.holder.pid()));
  st.image = std::move(*image);
  return 0;
}

}  // namespace slipway::spank
