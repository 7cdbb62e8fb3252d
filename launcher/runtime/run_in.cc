// run_in_container() (see run_in.h): a forked child becomes the user, keeps only its pipes, joins
// the container and execs; the parent collects output and fd 3 with poll(2) until both close or
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

#include "runtime/seccomp.h"

extern char** environ;

namespace slipway::launcher {
namespace {

[[noreturn]] void child(const ContainerHolder& holder, const LaunchSpec& spec,
                        const std::vector<std::string>& argv, const std::vector<std::string>& env,
                        const std::optional<SeccompProgram>& filter, int out_fd, int fd3) {
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0 ||
      dup2(fd3, 3) < 0)
    _exit(120);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  auto st = become_user(spec.uid, spec.gid);
  if (st.ok()) st = join_container(holder, spec, TaskView{{}, "/"});
  close_range(4, ~0U, 0);  // nothing of slurmstepd's (nor the namespace fds) reaches the command
  if (st.ok() && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    st = Status::from_errno("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  if (st.ok() && filter) st = install_seccomp(*filter);
  if (!st.ok()) {
    (void)!write(2, st.message().data(), st.message().size());
    _exit(121);
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
  _exit(127);
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Reads both pipes until they close; false when the deadline passed first.
bool collect(int out_fd, int fd3, RunResult& r, double deadline) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {fd3, POLLIN, 0}};
  std::string* sinks[2] = {&r.output, &r.fd3};
  int open_count = 2;
  while (open_count > 0) {
    double left = deadline - now_s();
    if (left <= 0) return false;
    if (poll(fds, 2, static_cast<int>(left * 1000) + 1) < 0 && errno != EINTR) return false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0 && sinks[i]->size() < (1u << 20)) sinks[i]->append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  return true;
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
  int out[2], extra[2];
  SLIPWAY_SYS(pipe2(out, O_CLOEXEC), "pipe2");
  UniqueFd out_r(out[0]), out_w(out[1]);
  SLIPWAY_SYS(pipe2(extra, O_CLOEXEC), "pipe2");
  UniqueFd extra_r(extra[0]), extra_w(extra[1]);
  pid_t pid = fork();
  if (pid < 0) return Status::from_errno("fork", errno);
  if (pid == 0) child(holder, spec, argv, env, filter, out_w.get(), extra_w.get());
  out_w.reset();
  extra_w.reset();
  RunResult r;
  const bool finished = collect(out_r.get(), extra_r.get(), r, now_s() + timeout_s);
  if (!finished) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished)
    return Status::error("'" + argv[0] + "' did not finish within " + std::to_string(timeout_s) +
                             " s",
                         ETIMEDOUT);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace slipway::launcher
