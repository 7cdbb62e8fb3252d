// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// mount_squashfs() and squashfs_mount_unavailable() (see squashfs_mount.h).
#include "runtime/squashfs_mount.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "common/run_tool.h"
#include "common/unique_fd.h"

namespace slipway::launcher {
namespace {

constexpr const char* kDaemon = "squashfuse_ll";
constexpr const char* kNoDaemon = "squashfuse_ll is not installed (apt install squashfuse)";

// In the forked child: become the daemon serving FUSE_FD. Only async-signal-safe calls.
int exec_daemon(char* const argv[], int fuse_fd) {
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0) return 127;
  // The daemon keeps the connection as fd 3: dup2 clears O_CLOEXEC, except onto itself.
  if (fuse_fd == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(fuse_fd, 3) < 0) return 127;
  close_range(4, ~0U, 0);
  char path_env[] = "PATH=/usr/bin:/bin", lang_env[] = "LC_ALL=C";
  char* envp[] = {path_env, lang_env, nullptr};
  execve(argv[0], argv, envp);
  return 127;
}

double seconds_since(const struct timespec& t0) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec - t0.tv_nsec);
}

}  // namespace

std::string squashfs_mount_unavailable() {
  if (find_tool(kDaemon).empty()) return kNoDaemon;
  UniqueFd fd(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  if (fd.valid()) return "";
  const int e = errno;
  return std::string("/dev/fuse: ") + strerror(e) +
         (e == EACCES ? " (users need read and write access: mode 0666, as Debian installs it)"
          : e == ENOENT ? " (load the fuse kernel module)"
                        : "");
}

Result<UniqueFd> mount_squashfs(const std::string& file, unsigned start_timeout_s) {
  const std::string tool = find_tool(kDaemon);
  if (tool.empty()) return Status::error(kNoDaemon, ENOENT);
  UniqueFd fuse(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  if (!fuse.valid()) return Status::from_errno("open /dev/fuse", errno);
  // A detached mount (fsopen/fsmount): attached nowhere in this namespace, it is not copied into
  // the container's as a locked mount, which a recursive bind of a directory above it (a cache
  // under /dev/shm, --container-mounts=/dev/shm) could not clone. fd= the connection, rootmode=
  // the root's type (a directory), user_id/group_id= who may use it; allow_other: every process
  // of this user namespace and those below it, and only those (fuse_allow_current_process() in
  // fs/fuse/dir.c), so the container's own ids need not match.
  UniqueFd fs(::fsopen("fuse.squashfuse", FSOPEN_CLOEXEC));
  if (!fs.valid()) fs.reset(::fsopen("fuse", FSOPEN_CLOEXEC));
  if (!fs.valid()) return Status::from_errno("fsopen fuse", errno);
  const std::pair<const char*, std::string> params[] = {
      {"source", file}, {"fd", std::to_string(fuse.get())}, {"rootmode", "40000"},
      {"user_id", std::to_string(getuid())}, {"group_id", std::to_string(getgid())}};
  for (const auto& [key, value] : params)
    SLIPWAY_SYS(::fsconfig(fs.get(), FSCONFIG_SET_STRING, key, value.c_str(), 0),
                std::string("FUSE mount option ") + key);
  SLIPWAY_SYS(::fsconfig(fs.get(), FSCONFIG_SET_FLAG, "allow_other", nullptr, 0),
              "FUSE mount option allow_other");
  SLIPWAY_SYS(::fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0), "create a FUSE mount");
  UniqueFd mnt(::fsmount(fs.get(), FSMOUNT_CLOEXEC,
                         MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!mnt.valid()) return Status::from_errno("fsmount the FUSE filesystem", errno);
  std::vector<std::string> args = {tool, "-f", "-o", "max_threads=8", file, "/dev/fd/3"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  struct timespec started;
  clock_gettime(CLOCK_MONOTONIC, &started);
  // The daemon dies with the container's owner, so the mount never outlives it (it lives in the
  // container's mount namespace alone, which goes with its last process).
  auto daemon = spawn({.name = "slipway-sqfs", .die_with_parent = true, .capture_stderr = true},
                      [&](int) { return exec_daemon(argv.data(), fuse.get()); });
  if (!daemon.ok()) return daemon.status().context("start squashfuse_ll");
  // Ours closed, the daemon's copy is the connection's last: if it exits, every request on the
  // mount fails (ENOTCONN) instead of waiting for an answer.
  fuse.reset();
  // A daemon that never answers (its file on a hung filesystem) would hang the step here: a
  // watchdog kills it after START_TIMEOUT_S, which ends our wait with ENOTCONN. It goes when
  // this function returns (Child's destructor).
  const pid_t daemon_pid = daemon->pid();
  auto watchdog = spawn({.die_with_parent = true}, [&](int) {
    sleep(start_timeout_s);
    ::kill(daemon_pid, SIGKILL);
    return 0;
  });
  if (!watchdog.ok()) return watchdog.status().context("start squashfuse_ll's watchdog");
  // Answered, and the root directory reads back: the daemon serves the file. (A damaged file
  // whose superblock holds is found here, when its inode and directory tables are read.)
  struct statfs sfs;
  int e = ::fstatfs(mnt.get(), &sfs) == 0 ? 0 : errno;
  if (e == 0) {
    UniqueFd root(::openat(mnt.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    char entries[4096];
    if (root.valid() && ::getdents64(root.get(), entries, sizeof entries) > 0) {
      daemon->release();  // it serves the mount as long as the container's owner lives
      return mnt;
    }
    e = errno ? errno : EIO;
  }
  // The watchdog's SIGKILL ended our wait when it came that late. (Judged by the clock: the
  // dying daemon closes the connection before it can be reaped, so its status may not be there
  // yet.)
  const bool timed_out = seconds_since(started) >= start_timeout_s;
  ::kill(daemon_pid, SIGKILL);
  std::string why = daemon->wait().stderr_line;
  while (!why.empty() && why.back() == '.') why.pop_back();
  if (timed_out)
    why = "squashfuse_ll did not answer within " + std::to_string(start_timeout_s) +
          " s (is the file on a hung filesystem?)";
  if (why.empty()) why = std::string("cannot read it through squashfuse_ll: ") + strerror(e);
  return Status::error(why, EBADMSG);
}

}  // namespace slipway::launcher
