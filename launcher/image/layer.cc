// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// apply_layer(): libarchive reads the layer; every entry is written by hand with *at() calls
// relative to directory fds obtained by open_dir_beneath(), so no path is ever resolved through a
// symlink. See layer.h for the rules; OCI image-spec layer.md for whiteouts.
#include "image/layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_set>

#include "common/text.h"
#include "image/archive_lazy.h"
#include "image/fs_beneath.h"
#include "image/gzip_source.h"

namespace slipway::launcher {
namespace {

constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";
constexpr uint64_t kEntryOverhead = 512;
constexpr mode_t kSetId = S_ISUID | S_ISGID;

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

Status archive_error(archive* a, std::string_view what) {
  const char* msg = archive_error_string(a);
  return Status::error("layer is corrupt or truncated (" + std::string(what) + ": " +
                           (msg ? msg : "unknown error") + ")",
                       EBADMSG);
}

bool is_dir_entry(int dirfd, const dirent* ent) {
  if (ent->d_type != DT_UNKNOWN) return ent->d_type == DT_DIR;
  struct stat st;
  return ::fstatat(dirfd, ent->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

// Removes whatever is at NAME so that something new can take its place (hard-link safe).
Status replace_existing(int parent, const std::string& name) {
  return remove_tree_at(parent, name.c_str());
}

// max_layer_ratio counts from this compressed size up: a small layer may always unpack to
// ratio x 16 MiB (a few zero-filled files compress to almost nothing).
constexpr uint64_t kRatioFloor = 16 << 20;
constexpr uint64_t kFreeCheckEvery = 64 << 20;

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", r);
  return buf;
}

}  // namespace

uint64_t layer_unpack_allowance(uint64_t compressed, double max_ratio) {
  if (max_ratio <= 0) return UINT64_MAX;
  const double allowed = max_ratio * static_cast<double>(std::max(compressed, kRatioFloor));
  return allowed >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(allowed);
}

std::string bound_text(std::string_view key, std::string_view value) {
  std::string var = "SLIPWAY_";
  for (char c : key) var += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return std::string(key) + "=" + std::string(value) + ", " + var;
}

namespace {

// min_free_space: the filesystem under FD keeps BUDGET.min_free_bytes available.
Status check_free_space(int fd, UnpackBudget& budget) {
  budget.free_checked_at = budget.used;
  struct statvfs vfs;
  if (::fstatvfs(fd, &vfs) == -1) return Status::from_errno("statvfs of the image cache", errno);
  uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (avail >= budget.min_free_bytes) return Status();
  return Status::error("the cache's filesystem has " + human_bytes(avail) + " free, below the " +
                           human_bytes(budget.min_free_bytes) +
                           " it must keep (" +
                           bound_text("min_free_space", human_bytes(budget.min_free_bytes)) + ")",
                       ENOSPC);
}

class LayerWriter {
 public:
  LayerWriter(int rootfd, UnpackBudget& budget, UnpackStats& stats)
      : rootfd_(rootfd), budget_(budget), stats_(stats) {}

  Status apply_entry(archive* a, archive_entry* e);

 private:
  Status charge(uint64_t n);
  void touch(const std::string& path);
  Status whiteout(std::string_view parent, std::string_view name);
  Status make_opaque(int dirfd, const std::string& dir_path);
  Status make_dir(int parent, const std::string& name, mode_t mode);
  Status write_file(archive* a, archive_entry* e, int parent, const std::string& name);
  Status make_symlink(archive_entry* e, int parent, const std::string& name);
  Status make_hardlink(const char* target, int parent, const std::string& name,
                       const std::string& path);
  Status make_fifo(int parent, const std::string& name, mode_t mode);
  mode_t safe_mode(mode_t m, mode_t owner_bits);

  int rootfd_;
  UnpackBudget& budget_;
  UnpackStats& stats_;
  std::unordered_set<std::string> touched_;  // paths this layer wrote, and their ancestors
};

Status LayerWriter::charge(uint64_t n) {
  budget_.used += n;
  budget_.layer_used += n;
  if (budget_.used > budget_.max_bytes)
    return Status::error("the image unpacks to more than " + human_bytes(budget_.max_bytes) +
                             " (" + bound_text("max_image_size", human_bytes(budget_.max_bytes)) +
                             "); it is too large or a "
                             "decompression bomb",
                         EFBIG);
  if (const uint64_t allowed = layer_unpack_allowance(budget_.layer_compressed, budget_.max_ratio);
      budget_.layer_used > allowed)
    return Status::error("the layer's " + human_bytes(budget_.layer_compressed) +
                             " unpack to more than " + human_bytes(allowed) + " (" +
                             bound_text("max_layer_ratio", ratio_text(budget_.max_ratio)) +
                             "): a decompression bomb, or raise the bound",
                         EFBIG);
  if (budget_.min_free_bytes && budget_.used - budget_.free_checked_at >= kFreeCheckEvery)
    return check_free_space(rootfd_, budget_);
  return Status();
}

// Marks PATH and its ancestors; stops at the first ancestor already marked (its own are too).
void LayerWriter::touch(const std::string& path) {
  for (std::string p = path; !p.empty();) {
    if (!touched_.insert(p).second) return;
    size_t slash = p.rfind('/');
    p.resize(slash == std::string::npos ? 0 : slash);
  }
}

mode_t LayerWriter::safe_mode(mode_t m, mode_t owner_bits) {
  if (m & kSetId) ++stats_.dropped_setid;
  return static_cast<mode_t>((m & 07777 & ~kSetId) | owner_bits);
}

Status LayerWriter::apply_entry(archive* a, archive_entry* e) {
  const char* raw = archive_entry_pathname(e);
  if (!raw) raw = archive_entry_pathname_utf8(e);
  if (!raw) return Status::error("entry without a usable name", EINVAL);
  auto path = clean_entry_path(raw);
  SLIPWAY_TRY(path);
  ++stats_.entries;
  SLIPWAY_TRY(charge(kEntryOverhead));
  if (path->empty()) return Status();  // the root itself: its mode stays ours
  auto [parent_path, name_view] = split_parent(*path);
  std::string name(name_view);
  if (name.rfind(kWhiteoutPrefix, 0) == 0) return whiteout(parent_path, name);
  auto parent = open_dir_beneath(rootfd_, parent_path, /*create=*/true);
  if (!parent.ok()) return parent.status().context("entry '" + std::string(raw) + "'");
  touch(*path);
  int pfd = parent->get();
  mode_t mode = archive_entry_perm(e) | (archive_entry_mode(e) & kSetId);
  if (const char* target = archive_entry_hardlink(e)) return make_hardlink(target, pfd, name, *path);
  switch (archive_entry_filetype(e)) {
    case AE_IFDIR: return make_dir(pfd, name, mode);
    case AE_IFREG: return write_file(a, e, pfd, name);
    case AE_IFLNK: return make_symlink(e, pfd, name);
    case AE_IFIFO: return make_fifo(pfd, name, mode);
    default:  // character and block devices, sockets: never created
      ++stats_.skipped_devices;
      return Status();
  }
}

Status LayerWriter::whiteout(std::string_view parent_path, std::string_view name) {
  auto parent = open_dir_beneath(rootfd_, parent_path, /*create=*/false);
  if (!parent.ok() && parent.status().error_number() == ENOENT) return Status();
  SLIPWAY_TRY(parent);
  if (name == kOpaqueMarker) return make_opaque(parent->get(), std::string(parent_path));
  std::string target(name.substr(kWhiteoutPrefix.size()));
  if (target.empty() || target == "." || target == ".." || target.find('/') != std::string::npos)
    return Status::error("bad whiteout '" + std::string(name) + "'", EINVAL);
  std::string full = parent_path.empty() ? target : std::string(parent_path) + "/" + target;
  if (touched_.count(full)) return Status();  // same-layer entries are not hidden (OCI spec)
  return remove_tree_at(parent->get(), target.c_str());
}

// Removes from DIRFD everything not written by this layer; directories this layer wrote are
// emptied of lower-layer content in turn.
Status LayerWriter::make_opaque(int dirfd, const std::string& dir_path) {
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno("open opaque directory '" + dir_path + "'", errno);
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return Status::from_errno("read opaque directory '" + dir_path + "'", errno);
  }
  Status st;
  while (dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name == "." || name == "..") continue;
    std::string child = dir_path.empty() ? name : dir_path + "/" + name;
    if (!touched_.count(child)) {
      st = remove_tree_at(::dirfd(d), name.c_str());
    } else if (is_dir_entry(::dirfd(d), ent)) {
      auto sub = open_dir_beneath(::dirfd(d), name, /*create=*/false);
      st = sub.ok() ? make_opaque(sub->get(), child) : sub.status();
    }
    if (!st.ok()) break;
  }
  ::closedir(d);
  return st;
}

Status LayerWriter::make_dir(int parent, const std::string& name, mode_t mode) {
  struct stat st;
  if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
    SLIPWAY_TRY(replace_existing(parent, name));
  if (::mkdirat(parent, name.c_str(), 0700) == -1 && errno != EEXIST)
    return Status::from_errno("create directory '" + name + "'", errno);
  UniqueFd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Status::from_errno("open directory '" + name + "'", errno);
  SLIPWAY_SYS(::fchmod(fd.get(), safe_mode(mode, S_IRWXU)), "chmod directory '" + name + "'");
  return Status();
}

Status LayerWriter::write_file(archive* a, archive_entry* e, int parent,
                               const std::string& name) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(parent, name.c_str(), kFlags, 0600));
  if (!fd.valid() && errno == EEXIST) {
    SLIPWAY_TRY(replace_existing(parent, name));
    fd.reset(::openat(parent, name.c_str(), kFlags, 0600));
  }
  if (!fd.valid()) return Status::from_errno("create file '" + name + "'", errno);
  const int64_t declared = archive_entry_size(e);
  const void* buf;
  size_t size;
  la_int64_t offset;
  int r;
  while ((r = archive_read_data_block(a, &buf, &size, &offset)) == ARCHIVE_OK) {
    if (offset < 0 || offset + static_cast<int64_t>(size) > declared)
      return Status::error("entry '" + name + "' has more data than its header declares", EBADMSG);
    SLIPWAY_TRY(charge(size));
    stats_.bytes += size;
    for (size_t done = 0; done < size;) {
      ssize_t w = ::pwrite(fd.get(), static_cast<const char*>(buf) + done, size - done,
                           offset + static_cast<off_t>(done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Status::from_errno("write '" + name + "'", errno);
      done += static_cast<size_t>(w);
    }
  }
  if (r != ARCHIVE_EOF) return archive_error(a, "data of '" + name + "'");
  SLIPWAY_SYS(::ftruncate(fd.get(), declared), "size '" + name + "'");  // sparse tails
  SLIPWAY_SYS(::fchmod(fd.get(), safe_mode(archive_entry_perm(e) | (archive_entry_mode(e) & kSetId),
                                           S_IRUSR | S_IWUSR)),
              "chmod '" + name + "'");
  timespec times[2] = {{archive_entry_mtime(e), archive_entry_mtime_nsec(e)},
                       {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
  ::futimens(fd.get(), times);  // best effort: a wrong mtime is harmless
  return Status();
}

Status LayerWriter::make_symlink(archive_entry* e, int parent, const std::string& name) {
  const char* target = archive_entry_symlink(e);
  if (!target || !*target) return Status::error("symlink '" + name + "' has no target", EINVAL);
  SLIPWAY_TRY(replace_existing(parent, name));
  SLIPWAY_SYS(::symlinkat(target, parent, name.c_str()), "create symlink '" + name + "'");
  return Status();
}

Status LayerWriter::make_hardlink(const char* target, int parent, const std::string& name,
                                  const std::string& path) {
  auto clean = clean_entry_path(target);
  if (!clean.ok() || clean->empty())
    return Status::error("hard link '" + path + "' points to '" + target +
                             "' outside the image root", EPERM);
  if (*clean == path) return Status();
  auto [tdir, tname_view] = split_parent(*clean);
  std::string tname(tname_view);
  auto tparent = open_dir_beneath(rootfd_, tdir, /*create=*/false);
  if (!tparent.ok() && tparent.status().error_number() != ENOENT)
    return tparent.status().context("hard link '" + path + "' to '" + target + "'");
  struct stat st;
  if (!tparent.ok() || ::fstatat(tparent->get(), tname.c_str(), &st, AT_SYMLINK_NOFOLLOW) == -1 ||
      S_ISDIR(st.st_mode))
    return Status::error("hard link '" + path + "' points to '" + target +
                             "', which is not a file earlier in the image", ENOENT);
  SLIPWAY_TRY(replace_existing(parent, name));
  // Flags 0: if the target is a symlink, the link is to the symlink itself (linkat(2)).
  SLIPWAY_SYS(::linkat(tparent->get(), tname.c_str(), parent, name.c_str(), 0),
              "hard link '" + path + "'");
  return Status();
}

Status LayerWriter::make_fifo(int parent, const std::string& name, mode_t mode) {
  SLIPWAY_TRY(replace_existing(parent, name));
  SLIPWAY_SYS(::mknodat(parent, name.c_str(), S_IFIFO | safe_mode(mode, S_IRUSR | S_IWUSR), 0),
              "create fifo '" + name + "'");
  return Status();
}

la_ssize_t read_gzip(archive* a, void* client, const void** buf) {
  std::string err;
  long n = static_cast<GzipSource*>(client)->next(buf, &err);
  if (n < 0) archive_set_error(a, EBADMSG, "%s", err.c_str());
  return n;
}

}  // namespace

Status apply_layer(int rootfd, int layer_fd, UnpackBudget& budget, UnpackStats* stats) {
  SLIPWAY_TRY(archive_library().load());
  UnpackStats local;
  std::unique_ptr<GzipSource> gzip;  // declared before the archive: it must outlive it
  if (is_gzip_file(layer_fd)) {
    auto src = GzipSource::open(layer_fd);
    if (src.ok()) gzip = std::move(*src);  // else libarchive's zlib reads it
  }
  ArchivePtr a(archive_read_new());
  if (!a) return Status::error("archive_read_new failed", ENOMEM);
  archive_read_support_format_tar(a.get());
  archive_read_support_format_empty(a.get());
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_zstd(a.get());
  int opened = gzip ? archive_read_open(a.get(), gzip.get(), nullptr, read_gzip, nullptr)
               : archive_read_open_fd(a.get(), layer_fd, 1 << 20);
  if (opened != ARCHIVE_OK) return archive_error(a.get(), "open");
  struct stat st;
  budget.layer_compressed = ::fstat(layer_fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  budget.layer_used = 0;
  if (budget.min_free_bytes) SLIPWAY_TRY(check_free_space(rootfd, budget));
  LayerWriter writer(rootfd, budget, stats ? *stats : local);
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) return Status();
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return archive_error(a.get(), "header");
    SLIPWAY_TRY(writer.apply_entry(a.get(), e));
  }
}

}  // namespace slipway::launcher
