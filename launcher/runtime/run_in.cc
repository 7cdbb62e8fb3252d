// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// run_in_container() (see run_in.h): a child (common/child.h) that is the user keeps only its
// pipes, joins the container and execs; the parent collects its output and fd 3 until it exits or
// the time limit passes.
#include "runtime/run_in.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "common/child.h"
#include "runtime/seccomp.h"

extern char** environ;

namespace slipway::launcher {
namespace {

// In the child (already the user, stdout and stderr into the captured pipe): the report pipe
// becomes fd 3, then join the container and exec. Returns only on failure, with its status.
int child(const ContainerHolder& holder, const LaunchSpec& spec, const std::vector<std::string>& argv,
          const std::vector<std::string>& env, const std::optional<SeccompProgram>& filter,
          int report_fd) {
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(report_fd, 3) < 0) return 120;
  Status st = join_container(holder, spec, TaskView{{}, "/"});
  close_range(4, ~0U, 0);  // nothing of slurmstepd's (nor the namespace fds) reaches the command
  if (st.ok() && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    st = Status::from_errno("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  if (st.ok() && filter) st = install_seccomp(*filter);
  if (!st.ok()) {
    (void)!write(2, st.message().data(), st.message().size());
    return 121;
  }
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  args.push_back(nullptr);
  envp.push_back(nullptr);
  environ = envp.data();  // execvp searches the PATH of the environment it runs with
  execvp(args[0], args.data());
  std::string m = "cannot run " + argv[0] + ": " + strerror(errno);
  (void)!write(2, m.data(), m.size());
  return 127;
}

}  // namespace

Result<RunResult> run_in_container(const ContainerHolder& holder, const LaunchSpec& spec,
                                   const std::vector<std::string>& argv,
                                   const std::vector<std::string>& env, int timeout_s) {
  if (argv.empty()) return Status::error("nothing to run", EINVAL);
  std::optional<SeccompProgram> filter;  // compiled before fork: the child only installs it
  if (spec.remap_root) {
    auto compiled = compile_fake_root_filter();
    SLIPWAY_TRY(compiled);
    filter = std::move(*compiled);
  }
  auto c = spawn({.uid = spec.uid, .gid = spec.gid, .die_with_parent = true, .capture_output = true},
                 [&](int report_fd) { return child(holder, spec, argv, env, filter, report_fd); });
  SLIPWAY_TRY(c);
  ChildExit done = c->wait(timeout_s);
  if (done.timed_out)
    return Status::error("'" + argv[0] + "' did not finish within " + std::to_string(timeout_s) +
                             " s",
                         ETIMEDOUT);
  return RunResult{.exit_code = done.code(), .output = std::move(done.output),
                   .fd3 = std::move(done.report)};
}

}  // namespace slipway::launcher
