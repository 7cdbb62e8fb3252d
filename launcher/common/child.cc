// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// spawn(), fork_child() and Child (see child.h).
#include "common/child.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <ctime>
#include <utility>

namespace slipway::launcher {
namespace {

constexpr size_t kKeepBytes = 1 << 20;

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Writes a constant message on FD (the report pipe); async-signal-safe.
void say(int fd, const char* msg) {
  if (fd >= 0) (void)!::write(fd, msg, strlen(msg));
}

// In the child, before anything else runs: only async-signal-safe calls (the parent may have had
// threads, whose locks the child inherits held). The ids change through the raw system calls:
// with one thread left, they are what the process gets. Returns why it failed, or nullptr.
const char* set_up_child(const ChildOptions& o, pid_t parent, int stderr_fd, int output_fd) {
  if (!o.keep_signals) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig)
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);  // glibc's own: EINVAL
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
  }
  if (o.name) ::prctl(PR_SET_NAME, o.name, 0, 0, 0);
  if (stderr_fd >= 0 && ::dup2(stderr_fd, 2) == -1) return "dup2 of stderr failed";
  if (output_fd >= 0 && (::dup2(output_fd, 1) == -1 || ::dup2(output_fd, 2) == -1))
    return "dup2 of stdout failed";
  if (o.uid != static_cast<uid_t>(-1) && (::getuid() == 0 || ::geteuid() == 0)) {
    const gid_t gid = o.gid;
    if (::syscall(SYS_setresuid, -1, 0, -1) != 0 || ::syscall(SYS_setgroups, 1, &gid) != 0 ||
        ::syscall(SYS_setresgid, gid, gid, gid) != 0 ||
        ::syscall(SYS_setresuid, o.uid, o.uid, o.uid) != 0)
      return "cannot become the job user";
  }
  // After the ids change: changing them clears the parent-death signal (commit_creds()).
  if (o.die_with_parent && !o.detach) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return "prctl(PR_SET_PDEATHSIG) failed";
    if (::getppid() != parent) return "the parent died before the child started";
  }
  return nullptr;
}

// Appends what one read of FD gives to SINK (up to kKeepBytes); false at end of file or error.
bool read_some(int fd, std::string& sink) {
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  if (sink.size() < kKeepBytes) sink.append(buf, static_cast<size_t>(n));
  return true;
}

struct Pipe {
  UniqueFd read, write;
};

Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::from_errno("pipe2", errno);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace

bool ChildExit::ok() const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

int ChildExit::code() const {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

std::string ChildExit::why() const {
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return "killed by signal " + std::to_string(WTERMSIG(status)) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exit status " + std::to_string(code());
}

int reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) == -1)
    if (errno != EINTR) return -1;
  return status;
}

std::string last_line(int fd) {
  struct stat st;
  if (::fstat(fd, &st) == -1 || st.st_size == 0) return "";
  const off_t from = st.st_size > 4096 ? st.st_size - 4096 : 0;
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  ssize_t n = ::pread(fd, text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

Child::Child(Child&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      status_(o.status_),
      reaped_(o.reaped_),
      report_(std::move(o.report_)),
      output_(std::move(o.output_)),
      stderr_(std::move(o.stderr_)) {}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    Child gone(std::move(*this));
    pid_ = std::exchange(o.pid_, -1);
    status_ = o.status_;
    reaped_ = o.reaped_;
    report_ = std::move(o.report_);
    output_ = std::move(o.output_);
    stderr_ = std::move(o.stderr_);
  }
  return *this;
}

Child::~Child() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGKILL);
  reap(pid_);
}

pid_t Child::release() { return std::exchange(pid_, -1); }

bool Child::pump(double timeout_s, bool until_report_eof, ChildExit& out) {
  const double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
  // The child's exit wakes poll(2) through a pidfd (Linux 5.3), so waiting costs no latency.
  const bool watch_exit = pid_ > 0 && !reaped_;  // a detached child's exit is not ours to see
  UniqueFd exited(watch_exit ? static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)) : -1);
  for (;;) {
    pollfd fds[3] = {{report_.get(), POLLIN, 0}, {output_.get(), POLLIN, 0}, {exited.get(), POLLIN, 0}};
    if (fds[0].fd < 0 && (until_report_eof || !watch_exit) && fds[1].fd < 0) return true;
    int wait_ms = -1;
    if (deadline > 0) {
      const double left = deadline - now_s();
      if (left <= 0) return false;
      wait_ms = static_cast<int>(left * 1000) + 1;
    }
    if (watch_exit && !exited.valid()) wait_ms = wait_ms < 0 || wait_ms > 10 ? 10 : wait_ms;
    if (::poll(fds, 3, wait_ms) < 0 && errno != EINTR) return true;
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && !read_some(report_.get(), out.report))
      report_.reset();
    if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) && !read_some(output_.get(), out.output))
      output_.reset();
    bool gone = fds[2].revents & POLLIN;
    if (watch_exit && !exited.valid()) {
      // No pidfd: pidfd_open failed, e.g. because the kernel already reaped the child (the
      // caller ignores SIGCHLD), and then waitpid answers ECHILD: gone, its status unknown (-1).
      int status = 0;
      const pid_t got = ::waitpid(pid_, &status, WNOHANG);
      gone = got == pid_ || (got == -1 && errno == ECHILD);
      if (gone) {
        status_ = got == pid_ ? status : -1;
        reaped_ = true;
      }
    }
    if (gone) {
      // What it wrote before it died; a descendant that keeps a pipe open is not waited for.
      for (UniqueFd* fd : {&report_, &output_}) {
        std::string& sink = fd == &report_ ? out.report : out.output;
        for (pollfd p = {fd->get(), POLLIN, 0}; fd->valid() && ::poll(&p, 1, 0) > 0;)
          if (!read_some(fd->get(), sink)) fd->reset();
      }
      return true;
    }
  }
}

std::string Child::read_report(double timeout_s) {
  ChildExit out;
  pump(timeout_s, /*until_report_eof=*/true, out);
  report_.reset();
  return out.report;
}

ChildExit Child::wait(double timeout_s) {
  ChildExit out;
  if (!pump(timeout_s, /*until_report_eof=*/false, out) && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    out.timed_out = true;
  }
  report_.reset();
  output_.reset();
  // -1: not our child any more (SIGCHLD ignored by the caller): its status is unknown, not 0.
  if (pid_ > 0 && !reaped_) {
    status_ = reap(pid_);
    reaped_ = true;
  }
  out.status = pid_ <= 0 ? 0 : status_ == -1 ? 255 << 8 : status_;
  if (stderr_.valid()) out.stderr_line = last_line(stderr_.get());
  return out;
}

Result<Child> spawn(const ChildOptions& options, const std::function<int(int report_fd)>& body) {
  auto report = make_pipe();
  SLIPWAY_TRY(report);
  Child child;
  UniqueFd output_write;
  if (options.capture_output) {
    auto out = make_pipe();
    SLIPWAY_TRY(out);
    child.output_ = std::move(out->read);
    output_write = std::move(out->write);
  }
  if (options.capture_stderr) {
    child.stderr_.reset(::memfd_create("slipway-child-stderr", MFD_CLOEXEC));
    if (!child.stderr_.valid()) return Status::from_errno("memfd_create", errno);
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == -1) return Status::from_errno("fork", errno);
  if (pid == 0) {
    const int wr = report->write.get();
    ::close(report->read.get());
    if (child.output_.valid()) ::close(child.output_.get());
    if (options.detach) {
      if (::setsid() == -1) {
        say(wr, "setsid failed");
        ::_exit(125);
      }
      const pid_t daemon = ::fork();  // the grandchild, in a session of its own
      if (daemon != 0) ::_exit(daemon > 0 ? 0 : 125);
    }
    if (const char* why = set_up_child(options, parent, child.stderr_.get(), output_write.get())) {
      say(wr, why);
      ::_exit(125);
    }
    int code = 125;
    try {
      code = body(wr);
    } catch (...) {
      say(wr, "the child process failed (an exception)");
    }
    ::_exit(code);
  }
  child.report_ = std::move(report->read);
  if (options.detach) {
    // The intermediate exits as soon as it has forked the daemon.
    const int status = reap(pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return Status::error("could not start a detached process", ECHILD);
    return child;
  }
  child.pid_ = pid;
  return child;
}

Result<Child> fork_child(const ChildOptions& options) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == -1) return Status::from_errno("fork", errno);
  Child child;
  child.pid_ = pid;
  if (pid == 0) {
    ChildOptions plain = options;
    plain.detach = false;
    if (const char* why = set_up_child(plain, parent, -1, -1)) {
      say(2, why);
      ::_exit(125);
    }
  }
  return child;
}

}  // namespace slipway::launcher
