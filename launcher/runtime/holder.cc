// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The holder of a node's container (see container.h): a child of the caller (common/child.h) that
// is the job user entirely, closes every inherited descriptor (a child that keeps slurmstepd's
// descriptors keeps the step alive: docs/platform.md, "SPANK callbacks"), builds the container,
// reports "ready" or the error through a pipe, then sleeps until it is killed or its parent dies.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/child.h"
#include "runtime/container.h"

namespace slipway::launcher {

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

// A detached holder lives while any task holds a shared flock on its users lock. It looks only
// while it holds the join lock, and exits still holding it, after the caller's when_unused: a
// task that holds the join lock is joining, or is the last and saving the container
// (--container-save), and one that waited for it finds what when_unused cleared.
[[noreturn]] void wait_for_users(const HolderOptions& options) {
  UniqueFd fd(open(options.users_lock.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd lock(open(options.join_lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  for (;;) {
    usleep(200 * 1000);
    if (lock.valid() && flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (fd.valid() && flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (lock.valid()) flock(lock.get(), LOCK_UN);
      continue;
    }
    if (options.when_unused) options.when_unused();
    _exit(0);
  }
}

// The holder's body (already the user; a detached one in a session of its own): builds the
// container, reports "ready PID" or the error on fd 3, then waits.
int run_holder(const LaunchSpec& spec, int report_fd, const HolderOptions& options) {
  Status st = isolate_descriptors(report_fd);
  if (st.ok()) {
    st = options.join > 0    ? join_namespaces(options.join, spec)
         : options.adopt > 0 ? adopt_container(options.adopt, spec)
                             : build_container(spec);
    // A holder that joined another one is in its namespace, whose mounts are shared already.
    if (st.ok() && options.join <= 0) st = share_container_mounts(spec);
  }
  const std::string msg = st.ok() ? "ready " + std::to_string(getpid()) : st.message();
  (void)!write(3, msg.data(), msg.size());
  ::close(3);
  if (!st.ok()) return 1;
  if (options.detached) wait_for_users(options);
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
  reap(pid_);
  pid_ = -1;
}

Result<ContainerHolder> start_holder(const LaunchSpec& spec, const HolderOptions& options) {
  // A detached holder is the caller's grandchild, in its own session: nothing that ends the
  // caller ends it. Otherwise it dies with the caller.
  auto child = spawn({.name = "slipway-holder", .uid = spec.uid, .gid = spec.gid,
                      .die_with_parent = !options.detached, .detach = options.detached},
                     [&](int report_fd) { return run_holder(spec, report_fd, options); });
  if (!child.ok()) return child.status().context("start the container holder");
  const std::string msg = child->read_report();
  if (msg.rfind("ready ", 0) != 0) {
    const ChildExit done = child->wait();
    return Status::error(
        !msg.empty() ? msg : "the container holder died while starting (" + done.why() + ")", EIO);
  }
  const pid_t holder_pid = static_cast<pid_t>(std::stol(msg.substr(6)));
  child->release();  // the ContainerHolder owns it from here (or nobody: a detached one)
  auto holder = open_namespaces(holder_pid, spec);
  if (holder.ok() && options.detached) holder->set_not_owned();
  if (!holder.ok() && !options.detached) {
    kill(holder_pid, SIGKILL);
    reap(holder_pid);
  }
  return holder;
}

Result<ContainerHolder> attach_holder(pid_t pid, const LaunchSpec& spec) {
  auto holder = open_namespaces(pid, spec);
  if (holder.ok()) holder->set_not_owned();
  return holder;
}


}  // namespace slipway::launcher
