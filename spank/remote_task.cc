// task_init on each node (the task process, fully the job user, just before slurmstepd execs the
// user's command): set the task's environment, join the node's container with a private view,
// then lock privileges down. The command is looked up after this returns, so inside the image.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/child.h"
#include "dl_doctor.h"
#include "dl_hooks.h"
#include "options/container_plan.h"
#include "log.h"
#include "plugin_state.h"
#include "remote_env.h"
#include "runtime/container.h"
#include "options/save.h"
#include "runtime/seccomp.h"

namespace slipway::spank {
namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return !p.empty() && stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string current_dir() {
  char buf[4096];
  return getcwd(buf, sizeof buf) ? std::string(buf) : std::string("/");
}

// What only this task gets: Slurm's PMIx server directory (in the task's environment only from
// task_init on: docs/platform.md, "SPANK callbacks") and its working directory, unless the
// node's binds cover it.
launcher::TaskView task_view(spank_t sp, const PluginState& st) {
  launcher::TaskView view;
  // sbatch_support: slurmd keeps the batch script in its spool directory; the container gets that
  // one file, read-only, at the same path, so slurmstepd can exec it.
  int argc = 0;
  char** argv = nullptr;
  if (st.ids && st.ids->step_id == SLURM_BATCH_SCRIPT &&
      spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0 && argv[0][0] == '/')
    view.binds.push_back({.source = argv[0], .destination = argv[0], .read_only = true,
                          .recursive = false});
  if (auto pmix = job_getenv(sp, "PMIX_SERVER_TMPDIR"); pmix && is_dir(*pmix))
    view.binds.push_back({.source = *pmix, .destination = *pmix});
  launcher::add_working_directory(st.options, st.spec, current_dir(), st.image->config.working_dir,
                                  view);
  return view;
}

// The image's Env and what its entrypoint exported (launcher::image_settings()); HOME inside.
void apply_image_env(spank_t sp, const PluginState& st) {
  auto job_has = [&](const std::string& name) { return job_getenv(sp, name.c_str()).has_value(); };
  for (const auto& [name, value] :
       launcher::image_settings(st.options, st.image->config.env, st.entrypoint_env, job_has))
    spank_setenv(sp, name.c_str(), value.c_str(), 1);
  if (auto home = launcher::container_home(st.spec, home_of(st.ids->uid)); !home.empty())
    spank_setenv(sp, "HOME", home.c_str(), 1);
}

// PMIx inside the container (docs/platform.md, "PMIx"): without the server's directory bound,
// the shared memory store (gds ds12/ds21) cannot be used; with root remapped inside, only munge
// can prove who we are to Slurm's PMIx server.
void adjust_pmix_env(spank_t sp, const PluginState& st, const launcher::TaskView& view) {
  auto tmpdir = job_getenv(sp, "PMIX_SERVER_TMPDIR");
  if (!tmpdir) return;  // not a PMIx step
  bool bound = std::any_of(view.binds.begin(), view.binds.end(),
                           [&](const auto& b) { return b.destination == *tmpdir; });
  if (!bound) spank_setenv(sp, "PMIX_MCA_gds", "hash", 1);
  if (st.spec.remap_root && is_dir("/run/munge")) spank_setenv(sp, "PMIX_MCA_psec", "munge", 1);
}

volatile sig_atomic_t g_cancelled = 0;
void note_cancel(int) { g_cancelled = 1; }

// The task's status as its own: the same exit code, or death by the same signal.
[[noreturn]] void exit_like(int status) {
  if (WIFSIGNALED(status)) {
    signal(WTERMSIG(status), SIG_DFL);
    kill(getpid(), WTERMSIG(status));
    _exit(128 + WTERMSIG(status));
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

// --container-save: slurmstepd reads a task's exit status before any plugin callback runs
// (_wait_for_any_task() in slurmstepd's mgr.c), so a save done after the task has exited could
// never fail the step. The task (outside the container, as the user) therefore runs the command
// in a child and waits for it; the node's last task to finish saves the container while its
// holder still runs, and a failed save is its exit status. srun's signals reach the child
// directly (the step's processes all get them); scancel's SIGTERM means no save.
[[noreturn]] void save_after_command(const PluginState& st, launcher::Child& child) {
  for (int sig : {SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGPIPE}) signal(sig, SIG_IGN);
  signal(SIGTERM, note_cancel);
  const int status = child.wait().status;
  if (__atomic_sub_fetch(st.tasks_running, 1, __ATOMIC_ACQ_REL) != 0 || g_cancelled) exit_like(status);
  launcher::SaveRequest req{.holder = st.holder.pid(), .spec = st.spec, .cache_dir = st.cache_dir,
                            .manifest_digest = st.image->manifest_digest,
                            .output_path = st.options.save_path};
  if (auto saved = launcher::save_container(req); !saved.ok()) {
    log_error(saved.message());
    exit_like(WIFEXITED(status) && WEXITSTATUS(status) != 0 ? status : 1 << 8);
  }
  log_info("saved the container to " + req.output_path);
  exit_like(status);
}

}  // namespace

int remote_task_init(spank_t sp) {
  PluginState& st = state();
  if (!st.deferred_error.empty()) {
    // A node-wide error: one line per node (local task 0), every task fails.
    int local_task = 0;
    if (spank_get_item(sp, S_TASK_ID, &local_task) != ESPANK_SUCCESS || local_task == 0)
      log_error(st.deferred_error);
    return -1;
  }
  if (!st.image) return 0;  // no container for this step
  int local_task = -1;
  if (st.options.entrypoint_log && spank_get_item(sp, S_TASK_ID, &local_task) == ESPANK_SUCCESS &&
      local_task == 0 && !st.entrypoint_output.empty())
    (void)!write(STDERR_FILENO, st.entrypoint_output.data(), st.entrypoint_output.size());
  if (st.tasks_running) {
    // The command keeps the signal dispositions slurmstepd gave the task.
    auto child = launcher::fork_child({.keep_signals = true});
    if (!child.ok()) {
      log_error("--container-save: " + child.status().message());
      return -1;
    }
    if (child->pid() > 0) save_after_command(st, *child);
  }
  apply_image_env(sp, st);
  launcher::TaskView view = task_view(sp, st);
  adjust_pmix_env(sp, st, view);
  if (auto dl = prepare_dl_task(sp, st, view); !dl.ok()) {
    log_error(dl.message());
    return -1;
  }
  if (auto status = launcher::join_container(st.holder, st.spec, view); !status.ok()) {
    log_error("cannot enter the container of image '" + st.options.container_image + "': " +
              status.message() + diagnosis_for(status, st));
    return -1;
  }
  // Nothing the user runs in the container may gain privileges (setuid binaries, file caps).
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    log_error(std::string("prctl(PR_SET_NO_NEW_PRIVS): ") + strerror(errno));
    return -1;
  }
  if (st.seccomp) {
    if (auto s = launcher::install_seccomp(*st.seccomp); !s.ok()) {
      log_error(s.message());
      return -1;
    }
  }
  return 0;
}

// slurmstepd, after every task of the node has exited (also after scancel): stop the holder.
int remote_exit(spank_t) {
  finish_node_container(state());
  return 0;
}

}  // namespace slipway::spank
