// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// task_init on each node (the task process, fully the job user, just before slurmstepd execs the
// user's command): set the task's environment, join the node's container with a private view,
// then lock privileges down. The command is looked up after this returns, so inside the image.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/child.h"
#include "dl_doctor.h"
#include "dl_hooks.h"
#include "log.h"
#include "plugin_state.h"
#include "remote_env.h"
#include "runtime/container.h"
#include "step/step.h"

namespace slipway::spank {
namespace {

// What this task sets and binds (launcher/step/step.h task_entry: the image's Env, what the
// entrypoint exported, HOME, PMIx's directory and settings, the working directory), set in the
// task's environment; and with sbatch_support, the batch script: slurmd keeps it in its spool
// directory, and the container gets that one file, read-only, at the same path, so slurmstepd can
// exec it. The PMIx server's directory is in the task's environment only from task_init on
// (docs/platform.md, "SPANK callbacks").
launcher::TaskView enter_environment(spank_t sp, const PluginState& st) {
  launcher::TaskInput in{.home = launcher::job_home(job_getenv(sp, "HOME"), st.ids->uid),
                         .entrypoint_env = st.entrypoint_env,
                         .job_env = [sp](const std::string& name) { return job_getenv(sp, name.c_str()); }};
  launcher::TaskEntry entry = launcher::task_entry(*st.step, st.options, in);
  for (const auto& [name, value] : entry.env) spank_setenv(sp, name.c_str(), value.c_str(), 1);
  int argc = 0;
  char** argv = nullptr;
  if (st.ids && st.ids->step_id == SLURM_BATCH_SCRIPT &&
      spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0 && argv[0][0] == '/')
    entry.view.binds.insert(entry.view.binds.begin(), {.source = argv[0], .destination = argv[0],
                                                       .read_only = true, .recursive = false});
  return entry.view;
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
  if (auto saved = launcher::save_step(st.holder.pid(), *st.step, st.options, st.cache_dir);
      !saved.ok()) {
    log_error(saved.message());
    exit_like(WIFEXITED(status) && WEXITSTATUS(status) != 0 ? status : 1 << 8);
  }
  log_info("saved the container to " + st.options.save_path);
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
  if (!st.step) return 0;  // no container for this step
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
  launcher::TaskView view = enter_environment(sp, st);
  if (auto dl = prepare_dl_task(sp, st, view); !dl.ok()) {
    log_error(dl.message());
    return -1;
  }
  if (auto status = launcher::join_container(st.holder, st.step->spec, view); !status.ok()) {
    log_error("cannot enter the container of image '" + st.options.container_image + "': " +
              status.message() + diagnosis_for(status, st));
    return -1;
  }
  // Nothing the user runs in the container may gain privileges (setuid binaries, file caps).
  if (auto s = launcher::lock_down(st.seccomp); !s.ok()) {
    log_error(s.message());
    return -1;
  }
  return 0;
}

// slurmstepd, after every task of the node has exited (also after scancel): stop the holder.
int remote_exit(spank_t) {
  finish_node_container(state());
  return 0;
}

}  // namespace slipway::spank
