// task_init on each node (the task process, fully the job user, just before slurmstepd execs the
// user's command): apply the image environment, then move the task into the container. The command
// is looked up after this returns, so it is found inside the image.
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "dl_hooks.h"
#include "log.h"
#include "plugin_state.h"
#include "remote_env.h"
#include "runtime/container.h"

namespace slipway::spank {
namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return !p.empty() && stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_under(const std::string& path, const std::string& dir) {
  return !dir.empty() && path.compare(0, dir.size(), dir) == 0 &&
         (path.size() == dir.size() || path[dir.size()] == '/');
}

std::string current_dir() {
  char buf[4096];
  return getcwd(buf, sizeof buf) ? std::string(buf) : std::string("/");
}

// What only this task gets: Slurm's PMIx server directory (in the task's environment only from
// task_init on: platform.md) and its working directory, unless the node's binds cover it.
launcher::TaskView task_view(spank_t sp, const launcher::LaunchSpec& node) {
  launcher::TaskView view;
  if (auto pmix = job_getenv(sp, "PMIX_SERVER_TMPDIR"); pmix && is_dir(*pmix))
    view.binds.push_back({.source = *pmix, .destination = *pmix});
  const std::string cwd = current_dir();
  bool covered = cwd == "/" || is_under(cwd, "/tmp");
  for (const auto& b : node.binds) covered = covered || is_under(cwd, b.destination);
  if (!covered && is_dir(cwd)) view.binds.push_back({.source = cwd, .destination = cwd});
  view.workdir = cwd;
  return view;
}

// Image Env under the job's: a variable the job sets wins, except PATH, whose host value means
// nothing inside the image (documented in slipway(1), ENVIRONMENT).
void apply_image_env(spank_t sp, const launcher::ImageConfig& config) {
  for (const auto& kv : config.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string name = kv.substr(0, eq);
    spank_setenv(sp, name.c_str(), kv.c_str() + eq + 1, name == "PATH" ? 1 : 0);
  }
}

}  // namespace

int remote_task_init(spank_t sp) {
  PluginState& st = state();
  if (!st.deferred_error.empty()) {
    log_error(st.deferred_error);
    return -1;
  }
  if (!st.image) return 0;  // no --container-image, or a step that runs outside containers
  apply_image_env(sp, st.image->config);
  launcher::TaskView view = task_view(sp, st.spec);
  if (auto dl = prepare_dl_task(sp, st, view); !dl.ok()) {
    log_error(dl.message());
    return -1;
  }
  auto status =
      launcher::join_container(st.holder.userns_fd(), st.holder.mntns_fd(), st.spec, view);
  if (!status.ok()) {
    log_error("cannot enter the container of image '" + st.options.container_image + "': " +
              status.message());
    return -1;
  }
  // Nothing the user runs in the container may gain privileges (setuid binaries, file caps).
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    log_error(std::string("prctl(PR_SET_NO_NEW_PRIVS): ") + strerror(errno));
    return -1;
  }
  return 0;
}

}  // namespace slipway::spank

namespace slipway::spank {

// slurmstepd, after every task of the node has exited (also after scancel): stop the holder.
int remote_exit(spank_t) {
  state().holder.stop();
  return 0;
}

}  // namespace slipway::spank
