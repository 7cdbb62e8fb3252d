// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NodeCache layout, ownership checks, tmp directories and flock-based locks (see cache.h).
#include "image/cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/file_util.h"
#include "image/fs_beneath.h"

namespace slipway::launcher {
namespace {

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// The cache root itself: a directory of ours that nobody else may write (they would write our
// images: a shared cache is one directory per user, never one for all, see cache.h).
Status check_owned(const std::string& path) {
  struct stat st;
  SLIPWAY_SYS(::lstat(path.c_str(), &st), "cache directory " + path);
  if (!S_ISDIR(st.st_mode))
    return Status::error("cache " + path + " is not a directory; remove it or choose another "
                         "cache directory", ENOTDIR);
  if (st.st_uid != ::geteuid())
    return Status::error("cache directory " + path + " belongs to uid " +
                             std::to_string(st.st_uid) + ", not to you (uid " +
                             std::to_string(::geteuid()) + "); choose another cache directory",
                         EPERM);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return Status::error("cache directory " + path + " is writable by others (mode " +
                             octal_mode(st.st_mode) + "); chmod 700 " + path,
                         EPERM);
  return Status();
}

// DIR, a directory above the cache CACHE: whoever may rename or delete its entries could put a
// tree of theirs where we look for our images between our check and our use of the path. Only
// root and we may, or anyone where the sticky bit keeps them to their own entries (/var/tmp, a
// site's 1777 cache_dir). A missing DIR is fine: we create it.
Status check_parent(const std::string& cache, const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == -1)
    return errno == ENOENT ? Status() : Status::from_errno("cache directory " + cache + ": " + dir, errno);
  const std::string where = "cache directory " + cache + " is inside " + dir;
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return Status::error(where + ", which belongs to uid " + std::to_string(st.st_uid) +
                             " (who could replace the cache); choose a cache directory whose "
                             "parents belong to root or to you",
                         EPERM);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
    return Status::error(where + ", which others may write without the sticky bit (mode " +
                             octal_mode(st.st_mode) + ": they could replace the cache); chmod +t " + dir +
                             " (as /tmp is) or choose another cache directory",
                         EPERM);
  return Status();
}

// "/a/b/c" -> "/", "/a", "/a/b": the directories above an absolute PATH, as written.
std::vector<std::string> parents_of(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::vector<std::string> out{"/"};
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
    if (path[slash - 1] != '/') out.push_back(path.substr(0, slash));
  return out;
}

// Every directory above CACHE, as written and, where symlinks lead elsewhere, as resolved.
Status check_parents(const std::string& cache) {
  std::vector<std::string> dirs = parents_of(cache);
  if (char* real = ::realpath(dirs.back().c_str(), nullptr)) {
    std::vector<std::string> resolved = parents_of(std::string(real) + "/x");
    ::free(real);
    dirs.insert(dirs.end(), resolved.begin(), resolved.end());
  }
  for (const std::string& dir : dirs) SLIPWAY_TRY(check_parent(cache, dir));
  return Status();
}

Status check_absolute(const std::string& root) {
  if (root.empty() || root.front() != '/')
    return Status::error("cache directory '" + root + "' is not an absolute path", EINVAL);
  return Status();
}

}  // namespace

std::string default_cache_dir(uid_t uid) { return "/var/tmp/slipway-" + std::to_string(uid); }

namespace {
bool usable_stat(const struct stat& st, uid_t uid) {
  return S_ISDIR(st.st_mode) && st.st_uid == uid && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}
}  // namespace

bool cache_root_is_usable(const std::string& path, uid_t uid) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == -1) return errno == ENOENT;
  return usable_stat(st, uid);
}

Result<std::string> claim_user_cache(const std::string& parent, uid_t uid, gid_t gid) {
  UniqueFd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return Status::from_errno("open " + parent, errno);
  const std::string name = "slipway-" + std::to_string(uid);
  std::string note;
  for (int attempt = 0; attempt < 4; ++attempt) {
    struct stat st;
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (usable_stat(st, uid)) return note;
      const std::string aside = name + ".squatted-" + random_suffix();
      SLIPWAY_SYS(::renameat(dir.get(), name.c_str(), dir.get(), aside.c_str()),
                  "move aside " + parent + "/" + name);
      note = parent + "/" + name + " was made by uid " + std::to_string(st.st_uid) +
             " (mode " + octal_mode(st.st_mode) + "), not for uid " + std::to_string(uid) +
             ": moved aside to " + parent + "/" + aside;
    } else if (errno != ENOENT) {
      return Status::from_errno("stat " + parent + "/" + name, errno);
    }
    // Made by root where only its owner may rename it (sticky /var/tmp), then given to UID.
    if (::mkdirat(dir.get(), name.c_str(), 0700) == -1) {
      if (errno == EEXIST) continue;  // someone was quicker: look again
      return Status::from_errno("create " + parent + "/" + name, errno);
    }
    UniqueFd made(::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!made.valid()) return Status::from_errno("open " + parent + "/" + name, errno);
    SLIPWAY_SYS(::fchown(made.get(), uid, gid), "chown " + parent + "/" + name);
    SLIPWAY_SYS(::fchmod(made.get(), 0700), "chmod " + parent + "/" + name);
    return note;
  }
  return Status::error(parent + "/" + name + " keeps being made by someone else", EAGAIN);
}

std::string user_default_cache_dir(std::string* note) {
  const uid_t uid = ::getuid();
  const std::string def = default_cache_dir(uid);
  if (cache_root_is_usable(def, uid)) return def;
  struct stat st = {};
  ::lstat(def.c_str(), &st);
  const std::string why = def + (S_ISLNK(st.st_mode)   ? " is a symlink"
                                 : !S_ISDIR(st.st_mode) ? " is not a directory"
                                 : st.st_uid != uid
                                     ? " belongs to uid " + std::to_string(st.st_uid) + ", not you"
                                     : " is writable by others (mode " + octal_mode(st.st_mode) + ")");
  // A private one made earlier (the name's random part cannot be squatted, only guessed: it
  // must be ours and private), else a new one.
  const std::string prefix = "slipway-" + std::to_string(uid) + ".";
  std::string chosen;
  if (DIR* d = ::opendir("/var/tmp")) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      struct stat es;
      if (n.rfind(prefix, 0) == 0 && n.find(".squatted-") == std::string::npos &&
          ::fstatat(::dirfd(d), e->d_name, &es, AT_SYMLINK_NOFOLLOW) == 0 && usable_stat(es, uid) &&
          (es.st_mode & 0777) == 0700) {
        chosen = "/var/tmp/" + n;
        break;
      }
    }
    ::closedir(d);
  }
  if (chosen.empty()) {
    std::string tmpl = "/var/tmp/" + prefix + "XXXXXX";
    if (::mkdtemp(tmpl.data())) chosen = tmpl;
  }
  if (chosen.empty()) {
    if (note) *note = why + "; set SLIPWAY_CACHE_DIR to a directory of yours";
    return def;  // the cache's own checks refuse it, saying why
  }
  if (note)
    *note = why + ": using " + chosen + " instead (set SLIPWAY_CACHE_DIR to choose another; root "
            "may remove " + def + ")";
  return chosen;
}

bool NodeCache::is_trusted() const { return check_trusted().ok(); }

Status NodeCache::check_trusted() const {
  SLIPWAY_TRY(check_absolute(root_));
  SLIPWAY_TRY(check_parents(root_));
  return check_owned(root_);
}

Status NodeCache::make_root() const {
  SLIPWAY_TRY(check_absolute(root_));
  SLIPWAY_TRY(check_parents(root_));  // before creating anything under them
  if (Status st = make_dirs(root_, 0700); !st.ok()) return st.context("create the cache");
  return check_owned(root_);
}

Status NodeCache::ensure_layout() const {
  SLIPWAY_TRY(make_root());
  for (const char* sub : {"/blobs", "/blobs/sha256", "/images", "/tmp", "/locks", "/squashfs"}) {
    std::string p = root_ + sub;
    if (::mkdir(p.c_str(), 0700) == -1 && errno != EEXIST)
      return Status::from_errno("create cache directory " + p, errno);
  }
  return Status();
}

std::string NodeCache::blob_path(std::string_view digest) const {
  return root_ + "/blobs/sha256/" + std::string(digest.substr(digest.find(':') + 1));
}

std::string NodeCache::image_dir(std::string_view manifest_digest) const {
  return root_ + "/images/" + std::string(manifest_digest.substr(manifest_digest.find(':') + 1));
}

std::string NodeCache::lock_path(std::string_view key) const {
  return root_ + "/locks/" + std::string(key) + ".lock";
}

Result<std::string> NodeCache::make_tmp_dir(std::string_view key) const {
  std::string p = tmp_dir() + "/" + std::string(key) + "." + std::to_string(::getpid()) + "." +
                  random_suffix();
  SLIPWAY_SYS(::mkdir(p.c_str(), 0700), "create " + p);
  return p;
}

Status NodeCache::remove_stale_tmp(std::string_view key) const {
  UniqueFd fd(::open(tmp_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Status::from_errno("open " + tmp_dir(), errno);
  DIR* d = ::fdopendir(fd.get());
  if (!d) return Status::from_errno("read " + tmp_dir(), errno);
  fd.release();
  // An importer's leftovers, and a remover's of the same image (unpublish() holds KEY's lock).
  const std::string prefix = std::string(key) + ".", removed = "rm-" + prefix;
  Status st;
  while (dirent* ent = ::readdir(d)) {
    if (std::strncmp(ent->d_name, prefix.c_str(), prefix.size()) != 0 &&
        std::strncmp(ent->d_name, removed.c_str(), removed.size()) != 0)
      continue;
    st = remove_tree_at(::dirfd(d), ent->d_name);
    if (!st.ok()) break;
  }
  ::closedir(d);
  return st;
}

Result<FileLock> FileLock::acquire(const std::string& path, Mode mode, bool wait) {
  return open_and_lock(path, O_RDWR | O_CREAT, mode, wait);
}

Result<FileLock> FileLock::acquire_existing(const std::string& path, Mode mode, bool wait) {
  return open_and_lock(path, O_RDONLY, mode, wait);
}

Result<FileLock> FileLock::open_and_lock(const std::string& path, int flags, Mode mode, bool wait) {
  FileLock lock;
  lock.fd_.reset(::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock.fd_.valid()) return Status::from_errno("open lock " + path, errno);
  int op = (mode == Mode::kShared ? LOCK_SH : LOCK_EX) | (wait ? 0 : LOCK_NB);
  for (;;) {
    if (::flock(lock.fd_.get(), op) == 0) return lock;
    if (errno == EINTR) continue;
    return Status::from_errno("lock " + path, errno);
  }
}

// /proc/locks (proc(5)) lists each lock as "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF", the
// device as major:minor in hex; a waiter's line has "->" after the number.
std::string lock_holders(const std::string& path) {
  struct stat st;
  auto locks = read_file_limited("/proc/locks", 4 << 20);
  if (::stat(path.c_str(), &st) == -1 || !locks.ok()) return "another process";
  char dev[64];
  std::snprintf(dev, sizeof dev, "%02x:%02x:%lu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long>(st.st_ino));
  std::string out;
  size_t start = 0;
  while (start < locks->size()) {
    size_t end = locks->find('\n', start);
    if (end == std::string::npos) end = locks->size();
    char kind[16] = {}, arrow[4] = {};
    long pid = 0;
    char where[64] = {};
    const std::string line = locks->substr(start, end - start);
    start = end + 1;
    // "N: FLOCK ADVISORY WRITE PID DEV ..." (holders) or "N: -> FLOCK ..." (waiters): skip waiters.
    if (std::sscanf(line.c_str(), "%*d: %3s", arrow) == 1 && std::string(arrow) == "->") continue;
    if (std::sscanf(line.c_str(), "%*d: %15s %*s %*s %ld %63s", kind, &pid, where) != 3 ||
        std::string(kind) != "FLOCK" || where != std::string(dev) || pid <= 0)
      continue;
    std::string who = "pid " + std::to_string(pid);
    auto comm = read_file_limited("/proc/" + std::to_string(pid) + "/comm", 64);
    struct stat ps;
    std::string detail;
    if (comm.ok() && !comm->empty()) detail = comm->substr(0, comm->find('\n'));
    if (::stat(("/proc/" + std::to_string(pid)).c_str(), &ps) == 0)
      detail += (detail.empty() ? "uid " : ", uid ") + std::to_string(ps.st_uid);
    if (!detail.empty()) who += " (" + detail + ")";
    if (out.find(who) == std::string::npos) out += (out.empty() ? "" : ", ") + who;
  }
  return out.empty() ? "another process" : out;
}

void FileLock::keep_across_exec() const {
  if (fd_.valid()) ::fcntl(fd_.get(), F_SETFD, 0);
}

bool FileLock::is_linked() const {
  struct stat st;
  return fd_.valid() && ::fstat(fd_.get(), &st) == 0 && st.st_nlink > 0;
}

bool FileLock::is_at(const std::string& path) const {
  struct stat ours, there;
  return fd_.valid() && ::fstat(fd_.get(), &ours) == 0 && ::stat(path.c_str(), &there) == 0 &&
         ours.st_dev == there.st_dev && ours.st_ino == there.st_ino;
}

std::string random_suffix() {
  unsigned char b[8] = {};
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s += kHex[c >> 4];
    s += kHex[c & 15];
  }
  return s;
}

}  // namespace slipway::launcher
