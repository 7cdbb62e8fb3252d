// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// --container-save (see save.h). The squashfs file is made in a child that joins the holder's user
// and mount namespaces and, in a private copy of the latter, sees the container's overlay root
// alone (a clone of that one mount, without /proc, /dev, binds or other submounts), which
// mksquashfs(1) packs with every file owned by root, as enroot's images are.
#include "options/save.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/run_tool.h"
#include "common/unique_fd.h"
#include "image/snapshot.h"
#include "runtime/container.h"

namespace slipway::launcher {
namespace {

// zstd at level 3: on debian-python's 298 MB root (2-core VM, tmpfs) it made 107 MB in 1.5 s and
// read back (sqfs2tar) in 0.31 s; zstd's default level 15: 94 MB in 15 s; lzo (enroot's default):
// 112 MB in 30 s, 0.52 s; lz4: 142 MB in 0.7 s, 0.14 s; gzip: 103 MB in 18 s, 0.93 s.
constexpr const char* kMksquashfs = "mksquashfs";
constexpr uint64_t kMaxSquashfs = 1ull << 40;  // what it may write: no limit in practice

// In the child: the container's root alone at SCRATCH/save (a fresh tmpfs over SCRATCH in a
// private mount namespace), for mksquashfs to read.
Status expose_root(const SaveRequest& req, std::string& root_out) {
  LaunchSpec joined = req.spec;
  joined.unshare_net = joined.unshare_ipc = joined.unshare_uts = false;
  SLIPWAY_TRY(join_namespaces(req.holder, joined));
  SLIPWAY_SYS(unshare(CLONE_NEWNS), "unshare a mount namespace");
  SLIPWAY_SYS(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), "make / private");
  const std::string& s = req.spec.scratch_dir;
  UniqueFd root(open_tree(AT_FDCWD, (s + "/root").c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!root.valid()) return Status::from_errno("clone the container's root", errno);
  SLIPWAY_SYS(mount("slipway", s.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700"), "mount tmpfs");
  root_out = s + "/save";
  SLIPWAY_SYS(mkdir(root_out.c_str(), 0700), "mkdir " + root_out);
  SLIPWAY_SYS(move_mount(root.get(), "", AT_FDCWD, root_out.c_str(), MOVE_MOUNT_F_EMPTY_PATH),
              "attach the container's root");
  return Status();
}

// Makes OUTPUT a squashfs of the directory PREPARE leaves in its argument, in a child (PREPARE
// enters namespaces there), written under a temporary name beside OUTPUT and renamed into place;
// the child hands back why it failed, if it did, through a pipe.
Status squash(const std::function<Status(std::string&)>& prepare, const std::string& output) {
  const std::string tool = find_tool(kMksquashfs);
  if (tool.empty()) return Status::error("mksquashfs is not installed on this node (squashfs-tools)", ENOENT);
  const std::string tmp = output + ".slipway-tmp-" + std::to_string(getpid());
  auto child = spawn({}, [&](int report_fd) {
    std::string root, why;
    Status st = prepare(root);
    if (!st.ok()) {
      why = st.message();
    } else {
      UniqueFd out(open("/dev/null", O_WRONLY | O_CLOEXEC));
      why = run_tool({tool, root, tmp, "-noappend", "-all-root", "-comp", "zstd",
                      "-Xcompression-level", "3", "-no-progress", "-quiet"},
                     out.get(), -1, kMaxSquashfs);
    }
    (void)!write(report_fd, why.data(), why.size());
    return why.empty() ? 0 : 1;
  });
  SLIPWAY_TRY(child);
  const ChildExit done = child->wait();
  const std::string& why = done.report;
  const bool made = done.ok() && why.empty();
  // Readable by everyone who can reach the directory (the group a site shares images with).
  if (made && chmod(tmp.c_str(), 0644) == 0 && rename(tmp.c_str(), output.c_str()) == 0)
    return Status();
  const int err = errno;
  unlink(tmp.c_str());
  if (made) return Status::from_errno("publish " + tmp + " as " + output, err);
  return Status::error(why.empty() ? "mksquashfs failed: " + done.why() : why, EIO);
}

// In the child: a user namespace with the user as root, so that mksquashfs reads files of the
// user's whatever their mode (CAP_DAC_OVERRIDE over files whose owner is mapped).
Status become_root_of_own_files() {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  SLIPWAY_SYS(unshare(CLONE_NEWUSER), "unshare a user namespace");
  auto write_map = [](const char* file, const std::string& line) {
    UniqueFd fd(open(file, O_WRONLY | O_CLOEXEC));
    return fd.valid() && write(fd.get(), line.data(), line.size()) == static_cast<ssize_t>(line.size());
  };
  if (!write_map("/proc/self/setgroups", "deny") ||
      !write_map("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n") ||
      !write_map("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n"))
    return Status::from_errno("map the user to root in a user namespace", errno);
  return Status();
}

}  // namespace

Status squash_directory(const std::string& dir, const std::string& output) {
  Status st = squash(
      [&](std::string& root) {
        root = dir;
        return become_root_of_own_files();
      },
      output);
  return st.ok() ? st : st.context("cannot write squashfs file '" + output + "'");
}

namespace {

Status save_squashfs(const SaveRequest& req) {
  return squash([&](std::string& root) { return expose_root(req, root); }, req.output_path);
}

}  // namespace

bool is_squashfs_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".sqsh") == 0;
}

Status save_container(const SaveRequest& req) {
  Status st;
  if (is_squashfs_path(req.output_path)) {
    st = save_squashfs(req);
  } else if (req.manifest_digest.starts_with("squashfs:")) {
    // A mounted squashfs image has no layers to put in an archive (the import unpacks it when
    // the step saves as an archive; a named container made before keeps its mounted image).
    st = Status::error("its image is a mounted squashfs file, which has no OCI layers; save it as "
                       "squashfs (--container-save=PATH.sqsh)", EINVAL);
  } else {
    SnapshotRequest snap;
    snap.cache_dir = req.cache_dir;
    snap.manifest_digest = req.manifest_digest;
    // The changes: the overlay's upper directory, on disk for a named container, else on the
    // holder's tmpfs, reached through its root.
    snap.upper_dir = req.spec.persistent_dir.empty()
                         ? "/proc/" + std::to_string(req.holder) + "/root" + req.spec.scratch_dir + "/upper"
                         : req.spec.persistent_dir + "/upper";
    snap.output_path = req.output_path;
    st = save_snapshot(snap);
  }
  if (st.ok()) return st;
  return Status::error("--container-save=" + req.output_path + ": the container was not saved: " +
                           st.message(),
                       st.error_number());
}

Status check_save_target(const std::string& path, const std::string& option) {
  struct stat s;
  const bool is_dir = (!path.empty() && path.back() == '/') ||
                      (stat(path.c_str(), &s) == 0 && S_ISDIR(s.st_mode));
  if (is_dir)
    return Status::error(option + "='" + path + "' is a directory; give a file path, e.g. " +
                             (path.back() == '/' ? path : path + "/") + "image.sqsh" +
                             (option == "--container-save"
                                  ? " (squashfs, as pyxis) or image.tar (an OCI archive)"
                                  : ""),
                         EISDIR);
  const std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty() && (stat(dir.c_str(), &s) != 0 || !S_ISDIR(s.st_mode)))
    return Status::error(option + "='" + path + "': directory '" + dir +
                             "' does not exist; create it or fix the path",
                         ENOENT);
  return Status();
}

}  // namespace slipway::launcher
