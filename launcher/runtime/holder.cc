// The holder of a node's container (see container.h): forked by the caller, it becomes the job user
// entirely, closes every inherited descriptor (a child that keeps slurmstepd's descriptors keeps
// the step alive: docs/platform.md, "SPANK callbacks"), builds the container, reports "ready" or
// the error through a pipe, then sleeps until it is killed or its parent dies.
#include <fcntl.h>
#include <sched.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "runtime/container.h"
#include "runtime/run_in.h"

namespace slipway::launcher {

void remove_run_dir(const std::string& dir) {
  // `lock` last: a task that arrives meanwhile waits on it (the remover holds it), then sees it
  // unlinked and starts afresh; it never finds a new `lock` beside the old `users`.
  for (const char* f : {"/holder", "/users", "/image", "/entrypoint", "/finished", "/lock"})
    unlink((dir + f).c_str());
  rmdir(dir.c_str());
}

namespace {

// Leaves the child with stdio on /dev/null and the report pipe as fd 3, nothing else.
Status isolate_descriptors(int report_fd) {
  if (report_fd != 3) {
    SLIPWAY_SYS(dup2(report_fd, 3), "dup2");
  }
  SLIPWAY_SYS(close_range(4, ~0U, 0), "close_range");
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return Status::from_errno("open /dev/null", errno);
  for (int fd = 0; fd < 3; ++fd) SLIPWAY_SYS(dup2(null_fd, fd), "dup2 /dev/null");
  ::close(null_fd);
  return Status();
}

// A detached holder lives while any task holds a shared flock on the users lock; the last one out
// leaves it to remove the step's run directory (the lock's directory: holder, lock, users files,
// and the image the step's tasks pinned). It looks only while it holds the directory's `lock`, and
// removes it still holding it: a task that holds `lock` is joining, or is the last and saving
// the container (--container-save), and one that waited for it sees the lock file unlinked.
[[noreturn]] void wait_for_users(const std::string& users_lock) {
  const std::string dir = users_lock.substr(0, users_lock.rfind('/'));
  UniqueFd fd(open(users_lock.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd lock(open((dir + "/lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  for (;;) {
    usleep(200 * 1000);
    if (lock.valid() && flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (fd.valid() && flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (lock.valid()) flock(lock.get(), LOCK_UN);
      continue;
    }
    remove_run_dir(dir);
    _exit(0);
  }
}

[[noreturn]] void run_holder(const LaunchSpec& spec, int report_fd, pid_t parent,
                             const HolderOptions& options) {
  Status st = isolate_descriptors(report_fd);
  if (options.detached) {
    // The grandchild of the caller, in its own session: nothing that ends the caller ends it.
    if (st.ok() && setsid() == -1) st = Status::from_errno("setsid", errno);
    pid_t pid = st.ok() ? fork() : 0;
    if (pid != 0) _exit(pid > 0 ? 0 : 1);
  } else {
    if (st.ok() && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
      st = Status::from_errno("prctl(PR_SET_PDEATHSIG)", errno);
    if (st.ok() && getppid() != parent) _exit(1);  // the parent died before PDEATHSIG was set
  }
  prctl(PR_SET_NAME, "slipway-holder", 0, 0, 0);  // what ps and top show admins
  if (st.ok()) st = become_user(spec.uid, spec.gid);
  if (st.ok()) {
    st = options.join > 0    ? join_namespaces(options.join, spec)
         : options.adopt > 0 ? adopt_container(options.adopt, spec)
                             : build_container(spec);
  }
  const std::string msg = st.ok() ? "ready " + std::to_string(getpid()) : st.message();
  (void)!write(3, msg.data(), msg.size());
  ::close(3);
  if (!st.ok()) _exit(1);
  if (options.detached) wait_for_users(options.users_lock);
  for (;;) pause();
}

// Opens the holder's namespaces: user and mount always, net/ipc/uts as the spec unshared them.
Result<ContainerHolder> open_namespaces(pid_t pid, const LaunchSpec& spec) {
  const std::string proc = "/proc/" + std::to_string(pid) + "/ns/";
  UniqueFd userns(open((proc + "user").c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd mntns(open((proc + "mnt").c_str(), O_RDONLY | O_CLOEXEC));
  if (!userns.valid() || !mntns.valid())
    return Status::from_errno("open the container holder's namespaces", errno);
  ContainerHolder holder(pid, std::move(userns), std::move(mntns));
  const std::pair<bool, std::pair<const char*, int>> others[] = {
      {spec.unshare_net, {"net", CLONE_NEWNET}},
      {spec.unshare_ipc, {"ipc", CLONE_NEWIPC}},
      {spec.unshare_uts, {"uts", CLONE_NEWUTS}}};
  for (const auto& [wanted, ns] : others) {
    if (!wanted) continue;
    UniqueFd fd(open((proc + ns.first).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return Status::from_errno(std::string("open the holder's ") + ns.first, errno);
    holder.add_namespace(std::move(fd), ns.second);
  }
  return holder;
}

}  // namespace

ContainerHolder::ContainerHolder(pid_t pid, UniqueFd userns, UniqueFd mntns)
    : pid_(pid), owner_(getpid()), userns_(std::move(userns)), mntns_(std::move(mntns)) {}

ContainerHolder::ContainerHolder(ContainerHolder&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      owner_(std::exchange(o.owner_, -1)),
      userns_(std::move(o.userns_)),
      mntns_(std::move(o.mntns_)),
      others_(std::move(o.others_)),
      owned_(std::move(o.owned_)) {}

ContainerHolder& ContainerHolder::operator=(ContainerHolder&& o) noexcept {
  if (this != &o) {
    stop();
    pid_ = std::exchange(o.pid_, -1);
    owner_ = std::exchange(o.owner_, -1);
    userns_ = std::move(o.userns_);
    mntns_ = std::move(o.mntns_);
    others_ = std::move(o.others_);
    owned_ = std::move(o.owned_);
  }
  return *this;
}

ContainerHolder::~ContainerHolder() { stop(); }

void ContainerHolder::stop() {
  userns_.reset();
  mntns_.reset();
  others_.clear();
  owned_.clear();
  if (pid_ <= 0 || owner_ != getpid()) return;
  kill(pid_, SIGKILL);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

Result<ContainerHolder> start_holder(const LaunchSpec& spec, const HolderOptions& options) {
  int fds[2];
  SLIPWAY_SYS(pipe2(fds, O_CLOEXEC), "pipe2");
  UniqueFd rd(fds[0]), wr(fds[1]);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status::from_errno("fork the container holder", errno);
  if (pid == 0) run_holder(spec, wr.get(), parent, options);
  wr.reset();
  ContainerHolder starting(pid, UniqueFd(), UniqueFd());  // reaps the child on every error path
  if (options.detached) {
    // The child exits as soon as it has forked the real holder.
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    starting.release();
  }
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(rd.get(), buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) msg.append(buf, static_cast<size_t>(n));
  if (msg.rfind("ready ", 0) != 0)
    return Status::error(msg.empty() ? "the container holder died while starting" : msg, EIO);
  const pid_t holder_pid = static_cast<pid_t>(std::stol(msg.substr(6)));
  starting.release();
  auto holder = open_namespaces(holder_pid, spec);
  if (holder.ok() && options.detached) holder->set_not_owned();
  if (!holder.ok() && !options.detached) {
    kill(holder_pid, SIGKILL);
    waitpid(holder_pid, nullptr, 0);
  }
  return holder;
}

Result<ContainerHolder> attach_holder(pid_t pid, const LaunchSpec& spec) {
  auto holder = open_namespaces(pid, spec);
  if (holder.ok()) holder->set_not_owned();
  return holder;
}

Status become_user(uid_t uid, gid_t gid) {
  if (getuid() != 0 && geteuid() != 0) return Status();  // already unprivileged
  SLIPWAY_SYS(seteuid(0), "seteuid(0)");
  SLIPWAY_SYS(setgroups(1, &gid), "setgroups");
  SLIPWAY_SYS(setresgid(gid, gid, gid), "setresgid");
  SLIPWAY_SYS(setresuid(uid, uid, uid), "setresuid");
  return Status();
}

}  // namespace slipway::launcher
