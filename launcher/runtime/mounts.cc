// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Mount helpers (see mounts.h). Every path inside the container root is resolved with openat2(2)
// RESOLVE_IN_ROOT so that a symlink planted in the image ("/home -> /etc") resolves inside the root
// instead of escaping to the host, and mounts target the resolved inode through /proc/self/fd.
#include "runtime/mounts.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string_view>
#include <vector>

namespace slipway::launcher {
namespace {

int openat2_in_root(int root_fd, const std::string& rel, int flags) {
  struct open_how how = {};
  how.flags = static_cast<unsigned long long>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
}

// Splits "/a//b/c/" into "a", "b", "c"; rejects "..", which could only mean climbing out.
Result<std::vector<std::string>> components(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string_view c(path.data() + i, j - i);
    if (c == "..") return Status::error("path '" + path + "' contains '..'", EINVAL);
    if (!c.empty() && c != ".") out.emplace_back(c);
    i = j + 1;
  }
  return out;
}

// Whether something may be created in directory REL (resolved in the root, open as PARENT): it
// is on the root's own filesystem, or REL names it without any symlink. A symlink of the image
// may not lead the setup onto a host filesystem bound into the container (/tmp, the home, a
// user's bind) and make mount points or files there: "/home -> /tmp/x" would create the home's
// mount point in the host's /tmp. The error names the path and why.
Status check_may_create_in(int root_fd, const std::string& rel, int parent, const std::string& what) {
  struct stat root_st, parent_st;
  if (::fstat(root_fd, &root_st) == 0 && ::fstat(parent, &parent_st) == 0 &&
      root_st.st_dev == parent_st.st_dev)
    return Status();
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS;
  UniqueFd literal(static_cast<int>(syscall(SYS_openat2, root_fd, rel.empty() ? "." : rel.c_str(),
                                            &how, sizeof how)));
  if (literal.valid()) return Status();
  return Status::error("cannot create " + what + ": a symlink in the image's '/" + rel +
                           "' leads out of the image, onto a filesystem bound from the host; the "
                           "image is broken or hostile: fix the symlink, or choose another path",
                       EXDEV);
}

}  // namespace

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

Result<UniqueFd> make_mount_point(int root_fd, const std::string& path, NodeKind kind) {
  auto parts = components(path);
  SLIPWAY_TRY(parts);
  if (parts->empty()) {
    UniqueFd fd(openat2_in_root(root_fd, ".", O_PATH | O_DIRECTORY));
    if (!fd.valid()) return Status::from_errno("open container root", errno);
    return fd;
  }
  // Most mount points exist (/proc, /sys, /tmp): one lookup. Otherwise walk and create.
  {
    std::string whole;
    for (const auto& p : *parts) whole += (whole.empty() ? "" : "/") + p;
    UniqueFd fd(openat2_in_root(root_fd, whole, O_PATH));
    if (fd.valid()) return fd;
    if (errno != ENOENT) return Status::from_errno("open '/" + whole + "' in container", errno);
  }
  std::string rel;
  for (size_t k = 0; k < parts->size(); ++k) {
    const bool last = k + 1 == parts->size();
    std::string next = rel.empty() ? (*parts)[k] : rel + "/" + (*parts)[k];
    UniqueFd fd(openat2_in_root(root_fd, next, O_PATH));
    if (!fd.valid() && errno == ENOENT) {
      // Create it inside the (already resolved, hence inside-root) parent.
      UniqueFd parent(openat2_in_root(root_fd, rel.empty() ? "." : rel, O_PATH | O_DIRECTORY));
      if (!parent.valid()) return Status::from_errno("open '" + rel + "' in container", errno);
      SLIPWAY_TRY(check_may_create_in(root_fd, rel, parent.get(),
                                      "mount point '" + path + "' in the container"));
      int rc;
      if (last && kind == NodeKind::kFile) {
        // O_PATH fds cannot create: reopen the parent as a directory for openat(O_CREAT).
        UniqueFd dir(openat(parent.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        rc = dir.valid() ? openat(dir.get(), (*parts)[k].c_str(),
                                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)
                         : -1;
        if (rc >= 0) ::close(rc);
      } else {
        UniqueFd dir(openat(parent.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        rc = dir.valid() ? mkdirat(dir.get(), (*parts)[k].c_str(), 0755) : -1;
      }
      if (rc < 0 && errno != EEXIST)
        return Status::from_errno("create mount point '/" + next + "' in container", errno);
      fd.reset(openat2_in_root(root_fd, next, O_PATH));
    }
    if (!fd.valid()) return Status::from_errno("open '/" + next + "' in container", errno);
    if (last) return fd;
    rel = std::move(next);
  }
  return Status::error("unreachable", EINVAL);
}

// statx(2) says whether FD is the root of a mount (STATX_ATTR_MOUNT_ROOT, Linux 5.8); the walk up
// with ".." stays inside one mount until it reaches that mount's root, so it ends there.
Result<UniqueFd> open_mount_root(int root_fd, const std::string& path) {
  const size_t start = path.find_first_not_of('/');
  const std::string rel = start == std::string::npos ? "." : path.substr(start);
  UniqueFd cur(openat2_in_root(root_fd, rel, O_PATH));
  if (!cur.valid()) return Status::from_errno("open '" + path + "' in container", errno);
  for (int depth = 0; depth < 4096; ++depth) {
    struct statx stx = {};
    if (statx(cur.get(), "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_TYPE, &stx) != 0)
      return Status::from_errno("statx '" + path + "' in container", errno);
    if (!(stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
      return Status::error("this kernel does not say which directory is a mount's root (statx "
                           "STATX_ATTR_MOUNT_ROOT, Linux >= 5.8)", ENOSYS);
    if (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) return cur;
    // A file that is not a mount root lies on the mount of its directory: go there by path, since
    // ".." of a file descriptor needs a directory.
    const size_t slash = rel.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : rel.substr(0, slash);
    cur.reset(S_ISDIR(stx.stx_mode) || depth > 0
                  ? openat(cur.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC)
                  : openat2_in_root(root_fd, dir, O_PATH | O_DIRECTORY));
    if (!cur.valid()) return Status::from_errno("open the directory above '" + path + "'", errno);
  }
  return Status::error("no mount root above '" + path + "' in container", ELOOP);
}

Status write_file_in_root(int root_fd, const std::string& path, const std::string& data) {
  const size_t slash = path.rfind('/');
  const std::string dir = path.substr(0, slash), name = path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..")
    return Status::error("cannot write '" + path + "' in the container: not a file name", EINVAL);
  UniqueFd parent(openat2_in_root(root_fd, dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY));
  if (!parent.valid()) return errno == ENOENT ? Status() : Status::from_errno("open " + dir, errno);
  std::string rel_dir = dir;
  rel_dir.erase(0, rel_dir.find_first_not_of('/'));
  SLIPWAY_TRY(check_may_create_in(root_fd, rel_dir, parent.get(), "'" + path + "' in the container"));
  UniqueFd fd(openat(parent.get(), name.c_str(),
                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::from_errno("write '" + path + "' in the container", errno);
  for (size_t done = 0; done < data.size();) {
    ssize_t n = write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno("write '" + path + "' in the container", errno);
    done += static_cast<size_t>(n);
  }
  return Status();
}

Status bind_onto(const std::string& source, int target_fd, BindFlags flags, const std::string& what) {
  const bool recursive = flags.recursive, read_only = flags.read_only;
  // A detached copy of the source tree (open_tree(2)), its flags set while nobody can see it, then
  // attached at the exact inode target_fd names (move_mount(2)): no path is looked up twice.
  unsigned int clone_flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0);
  UniqueFd tree(open_tree(AT_FDCWD, source.c_str(), clone_flags));
  if (!tree.valid()) return Status::from_errno("bind " + what + ": open " + source, errno);
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_NOSUID | (flags.allow_devices ? 0 : MOUNT_ATTR_NODEV) |
                  (read_only ? MOUNT_ATTR_RDONLY : 0) | (flags.no_exec ? MOUNT_ATTR_NOEXEC : 0);
  SLIPWAY_SYS(mount_setattr(tree.get(), "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr,
                            sizeof attr),
              "bind " + what + ": set mount flags");
  SLIPWAY_SYS(move_mount(tree.get(), "", target_fd, "",
                         MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
              "bind " + what);
  return Status();
}

}  // namespace slipway::launcher
