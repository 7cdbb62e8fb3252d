// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Symlink-proof tree walking and removal (see fs_beneath.h). openat2(2) has been in Linux since
// 5.6; on ENOSYS (old kernels, some seccomp profiles) the same guarantees come from an
// O_NOFOLLOW walk, one component at a time.
#include "image/fs_beneath.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace slipway::launcher {
namespace {

long sys_openat2(int dirfd, const char* path, int flags, uint64_t resolve) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = resolve;
  return ::syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

Status not_beneath(std::string_view dir, int err) {
  return Status::error("path '" + std::string(dir) +
                           "' goes through a symlink or a non-directory; refusing to follow it",
                       err);
}

Result<UniqueFd> walk_components(int rootfd, std::string_view dir, bool create) {
  UniqueFd cur(::openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!cur.valid()) return Status::from_errno("open image root", errno);
  size_t pos = 0;
  while (pos < dir.size()) {
    size_t end = dir.find('/', pos);
    if (end == std::string_view::npos) end = dir.size();
    std::string comp(dir.substr(pos, end - pos));
    pos = end + 1;
    for (int tries = 0;; ++tries) {
      int fd = ::openat(cur.get(), comp.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) {
        cur.reset(fd);
        break;
      }
      if (errno == ENOTDIR || errno == ELOOP) return not_beneath(dir, errno);
      if (errno != ENOENT || !create || tries > 0)
        return Status::from_errno("open directory '" + std::string(dir) + "'", errno);
      if (::mkdirat(cur.get(), comp.c_str(), 0755) == -1 && errno != EEXIST)
        return Status::from_errno("create directory '" + std::string(dir) + "'", errno);
    }
  }
  return cur;
}

}  // namespace

Result<std::string> clean_entry_path(std::string_view path) {
  std::string out;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string_view comp = path.substr(pos, end - pos);
    pos = end + 1;
    if (comp.empty() || comp == ".") continue;
    if (comp == "..")
      return Status::error("entry '" + std::string(path) +
                               "' climbs out of the image root with '..'", EPERM);
    if (!out.empty()) out += '/';
    out += comp;
  }
  if (out.find('\0') != std::string::npos)
    return Status::error("entry name contains a NUL byte", EINVAL);
  return out;
}

std::pair<std::string_view, std::string_view> split_parent(std::string_view clean) {
  size_t slash = clean.rfind('/');
  if (slash == std::string_view::npos) return {std::string_view(), clean};
  return {clean.substr(0, slash), clean.substr(slash + 1)};
}

Result<UniqueFd> open_dir_beneath(int rootfd, std::string_view dir, bool create) {
  std::string d(dir.empty() ? "." : dir);
  constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = sys_openat2(rootfd, d.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC, kResolve);
  if (fd >= 0) return UniqueFd(static_cast<int>(fd));
  if (errno == ELOOP || errno == ENOTDIR || errno == EXDEV) return not_beneath(dir, errno);
  if (errno == EAGAIN || errno == ENOSYS || (errno == ENOENT && create) || errno == EPERM)
    return walk_components(rootfd, dir, create);
  return Status::from_errno("open directory '" + std::string(dir) + "'", errno);
}

namespace {

// Directories deeper than this below the removal's root are removed without keeping their
// ancestors open (remove_deep_tree), so a tree thousands of levels deep needs no more than
// kOpenLevels + 2 descriptors whatever RLIMIT_NOFILE is.
constexpr int kOpenLevels = 32;

bool is_dot(const char* n) { return n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0)); }

// Removes NAME in DIRFD when it is not a directory. True: gone (or was never there).
Result<bool> unlink_non_directory(int dirfd, const char* name) {
  if (::unlinkat(dirfd, name, 0) == 0 || errno == ENOENT) return true;
  if (errno == EISDIR || errno == EPERM) return false;
  return Status::from_errno("remove '" + std::string(name) + "'", errno);
}

// A directory we are about to empty: opened without following symlinks, u+rwx (we own it; an
// image may ship directories without them).
Result<UniqueFd> open_for_removal(int dirfd, const char* name) {
  int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES) {
    ::fchmodat(dirfd, name, 0700, 0);
    fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) return Status::from_errno("open '" + std::string(name) + "' for removal", errno);
  ::fchmod(fd, 0700);
  return UniqueFd(fd);
}

// Unlinks every non-directory entry of FD; returns the name of one subdirectory left ("" when
// the directory is now empty). Reads through a duplicate, so FD stays usable.
Result<std::string> unlink_entries(int fd) {
  int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return Status::from_errno("duplicate a directory descriptor", errno);
  DIR* d = ::fdopendir(copy);
  if (!d) {
    ::close(copy);
    return Status::from_errno("read a directory being removed", errno);
  }
  ::rewinddir(d);  // the duplicate shares the offset of earlier scans
  std::string subdir;
  Status st;
  while (dirent* ent = ::readdir(d)) {
    if (is_dot(ent->d_name)) continue;
    Result<bool> gone = unlink_non_directory(fd, ent->d_name);
    if (!gone.ok()) {
      st = gone.status();
      break;
    }
    if (!*gone && subdir.empty()) subdir = ent->d_name;
  }
  ::closedir(d);
  if (!st.ok()) return st;
  return subdir;
}

// Removes directory NAME in DIRFD holding two descriptors at a time: it descends into the first
// subdirectory left, and climbs back through ".." once a directory is empty, checking that ".."
// is still the directory it came from (device and inode), so a tree renamed under it is never
// escaped. Each climb re-reads the parent, which by then holds only what is left to remove.
Status remove_deep_tree(int dirfd, const char* name) {
  struct Level {
    std::string name;  // in its parent
    dev_t dev;
    ino_t ino;
  };
  std::vector<Level> path;
  Result<UniqueFd> cur = open_for_removal(dirfd, name);
  SLIPWAY_TRY(cur.status());
  UniqueFd fd = std::move(*cur);
  struct stat st {};
  SLIPWAY_SYS(::fstat(fd.get(), &st), "stat a directory being removed");
  path.push_back({name, st.st_dev, st.st_ino});
  for (;;) {
    Result<std::string> sub = unlink_entries(fd.get());
    SLIPWAY_TRY(sub.status());
    if (!sub->empty()) {
      Result<UniqueFd> child = open_for_removal(fd.get(), sub->c_str());
      SLIPWAY_TRY(child.status());
      SLIPWAY_SYS(::fstat(child->get(), &st), "stat a directory being removed");
      path.push_back({*sub, st.st_dev, st.st_ino});
      fd = std::move(*child);
      continue;
    }
    if (path.size() == 1) break;
    int up = ::openat(fd.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (up < 0) return Status::from_errno("climb out of a directory being removed", errno);
    UniqueFd parent(up);
    const Level& above = path[path.size() - 2];
    SLIPWAY_SYS(::fstat(parent.get(), &st), "stat a directory being removed");
    if (st.st_dev != above.dev || st.st_ino != above.ino)
      return Status::error("directory '" + std::string(name) +
                               "' was moved while it was being removed; removal stopped",
                           EBUSY);
    SLIPWAY_SYS(::unlinkat(parent.get(), path.back().name.c_str(), AT_REMOVEDIR),
                "remove directory '" + path.back().name + "'");
    path.pop_back();
    fd = std::move(parent);
  }
  fd.reset();
  SLIPWAY_SYS(::unlinkat(dirfd, name, AT_REMOVEDIR), "remove directory '" + std::string(name) + "'");
  return Status();
}

// Depth-first with the open directory streams of at most kOpenLevels levels, then remove_deep_tree.
Status remove_tree_below(int dirfd, const char* name, int depth) {
  Result<bool> gone = unlink_non_directory(dirfd, name);
  SLIPWAY_TRY(gone.status());
  if (*gone) return Status();
  if (depth >= kOpenLevels) return remove_deep_tree(dirfd, name);
  Result<UniqueFd> fd = open_for_removal(dirfd, name);
  SLIPWAY_TRY(fd.status());
  DIR* d = ::fdopendir(fd->get());
  if (!d) return Status::from_errno("read directory '" + std::string(name) + "'", errno);
  fd->release();
  Status st;
  while (dirent* ent = ::readdir(d)) {
    if (is_dot(ent->d_name)) continue;
    st = remove_tree_below(::dirfd(d), ent->d_name, depth + 1);
    if (!st.ok()) break;
  }
  ::closedir(d);
  SLIPWAY_TRY(st);
  SLIPWAY_SYS(::unlinkat(dirfd, name, AT_REMOVEDIR), "remove directory '" + std::string(name) + "'");
  return Status();
}

}  // namespace

Status remove_tree_at(int dirfd, const char* name) { return remove_tree_below(dirfd, name, 0); }

}  // namespace slipway::launcher
