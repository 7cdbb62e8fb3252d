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

#include <cstring>

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

Status remove_tree_at(int dirfd, const char* name) {
  if (::unlinkat(dirfd, name, 0) == 0 || errno == ENOENT) return Status();
  if (errno != EISDIR && errno != EPERM)
    return Status::from_errno("remove '" + std::string(name) + "'", errno);
  int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES) {  // a directory without u+rx: we own it, so fix that
    ::fchmodat(dirfd, name, 0700, 0);
    fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) return Status::from_errno("open '" + std::string(name) + "' for removal", errno);
  ::fchmod(fd, 0700);  // u+w to unlink its entries
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return Status::from_errno("read directory '" + std::string(name) + "'", errno);
  }
  Status st;
  while (dirent* ent = ::readdir(d)) {
    if (std::strcmp(ent->d_name, ".") == 0 || std::strcmp(ent->d_name, "..") == 0) continue;
    st = remove_tree_at(::dirfd(d), ent->d_name);
    if (!st.ok()) break;
  }
  ::closedir(d);
  SLIPWAY_TRY(st);
  SLIPWAY_SYS(::unlinkat(dirfd, name, AT_REMOVEDIR), "remove directory '" + std::string(name) + "'");
  return Status();
}

}  // namespace slipway::launcher
