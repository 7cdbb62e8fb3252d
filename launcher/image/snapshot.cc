// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// save_snapshot() (snapshot.h) in three steps. (1) The overlay's upper directory is walked with
// *at() calls that never follow a symlink and written as a pax tar, hashed as it is written (the
// diff_id) and gzipped by ISA-L into an unlinked scratch file. (2) The cached image's manifest and
// config are read and verified, and the new config, manifest and index made. (3) The OCI archive
// is written to a temp file beside the destination and renamed into place.
#include "image/snapshot.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <isa-l/igzip_lib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "image/archive_lazy.h"
#include "image/cache.h"
#include "image/digest.h"
#include "image/gzip_source.h"
#include "image/image_ref.h"
#include "image/manifest.h"
#include "image/oci_writer.h"

namespace slipway::launcher {
namespace {

using nlohmann::json;

constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";
constexpr std::string_view kCreatedBy = "slipway --container-save";
constexpr size_t kChunk = 1 << 20;
constexpr size_t kMaxSmallFile = 8 << 20;  // manifests and configs are far smaller

struct ArchiveWriteFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
using WriterPtr = std::unique_ptr<archive, ArchiveWriteFree>;
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using EntryPtr = std::unique_ptr<archive_entry, EntryFree>;

Status archive_failed(archive* a, const std::string& what) {
  const char* m = archive_error_string(a);
  int err = archive_errno(a);
  return Status::error(what + ": " + (m ? m : "libarchive error"), err > 0 ? err : EIO);
}

Status write_all(int fd, const void* data, size_t n, const std::string& what) {
  for (size_t done = 0; done < n;) {
    ssize_t w = ::write(fd, static_cast<const char*>(data) + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::from_errno(what, errno);
    done += static_cast<size_t>(w);
  }
  return Status();
}

Result<std::string> read_small_file(const std::string& path) {
  return read_file_limited(path, kMaxSmallFile);
}

std::string rfc3339_now() {
  time_t t = ::time(nullptr);
  struct tm tm;
  ::gmtime_r(&t, &tm);
  char buf[32];
  ::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Overlay xattr NAME ("opaque", "whiteout", ...) of FD, if set: user.overlay.* when the overlay
// was mounted with userxattr (the only kind a user namespace may write), else trusted.overlay.*
// (Documentation/filesystems/overlayfs.rst). A value longer than 255 bytes comes back cut.
std::optional<std::string> overlay_xattr(int fd, const char* name) {
  for (const char* ns : {"user.overlay.", "trusted.overlay."}) {
    char buf[256];
    ssize_t n = ::fgetxattr(fd, (std::string(ns) + name).c_str(), buf, sizeof buf);
    if (n >= 0) return std::string(buf, static_cast<size_t>(n));
    if (errno == ERANGE) return std::string(buf, sizeof buf);
  }
  return std::nullopt;
}

// --- (1) The new layer ---

// Where the layer tar goes: hashed as written (the diff_id), gzipped by ISA-L at level 1 (several
// times zlib's speed; gzip_source.h inflates with it too) into FD, and hashed again (the digest).
class GzipBlobSink {
 public:
  explicit GzipBlobSink(int fd) : fd_(fd), level_buf_(ISAL_DEF_LVL1_DEFAULT), out_(kChunk) {
    isal_deflate_init(&z_);
    z_.gzip_flag = IGZIP_GZIP;
    z_.level = 1;
    z_.level_buf = level_buf_.data();
    z_.level_buf_size = static_cast<uint32_t>(level_buf_.size());
  }
  GzipBlobSink(const GzipBlobSink&) = delete;
  GzipBlobSink& operator=(const GzipBlobSink&) = delete;

  Status write(const void* data, size_t n) {
    tar_hash_.update(data, n);
    for (auto* p = static_cast<const uint8_t*>(data); n > 0;) {
      uint32_t part = static_cast<uint32_t>(std::min<size_t>(n, 1u << 30));
      z_.next_in = const_cast<uint8_t*>(p);
      z_.avail_in = part;
      SLIPWAY_TRY(pump(false));
      p += part;
      n -= part;
    }
    return Status();
  }
  Status finish() {
    z_.next_in = nullptr;
    z_.avail_in = 0;
    SLIPWAY_TRY(pump(true));
    diff_id_ = tar_hash_.finish();
    digest_ = gz_hash_.finish();
    return Status();
  }
  // Remembers the first failure (libarchive only sees -1 from the write callback).
  Status failed(Status st) {
    if (error_.ok()) error_ = std::move(st);
    return error_;
  }
  const Status& error() const { return error_; }
  const std::string& diff_id() const { return diff_id_; }
  const std::string& digest() const { return digest_; }
  uint64_t size() const { return size_; }

 private:
  // Deflates what is in z_.next_in (and, when LAST, the rest) and writes it out.
  Status pump(bool last) {
    z_.end_of_stream = last ? 1 : 0;
    do {
      z_.next_out = out_.data();
      z_.avail_out = static_cast<uint32_t>(out_.size());
      if (isal_deflate(&z_) != COMP_OK)
        return Status::error("gzip compression of the new layer failed (ISA-L)", EIO);
      size_t n = out_.size() - z_.avail_out;
      gz_hash_.update(out_.data(), n);
      size_ += n;
      SLIPWAY_TRY(write_all(fd_, out_.data(), n, "write the new layer"));
    } while (z_.avail_in > 0 || (last && z_.internal_state.state != ZSTATE_END));
    return Status();
  }

  int fd_;
  isal_zstream z_{};
  std::vector<uint8_t> level_buf_, out_;
  Sha256 tar_hash_, gz_hash_;
  std::string diff_id_, digest_;
  uint64_t size_ = 0;
  Status error_;
};

la_ssize_t sink_write(archive* a, void* self, const void* data, size_t n) {
  auto* sink = static_cast<GzipBlobSink*>(self);
  Status st = sink->write(data, n);
  if (st.ok()) return static_cast<la_ssize_t>(n);
  st = sink->failed(std::move(st));
  archive_set_error(a, st.error_number() ? st.error_number() : EIO, "%s", st.message().c_str());
  return -1;
}

// Writes the upper directory into the layer tar A: depth first, names sorted (the same changes
// give the same layer), every entry reached through its parent's fd with O_NOFOLLOW.
class UpperWalker {
 public:
  UpperWalker(archive* a, std::string upper) : a_(a), upper_(std::move(upper)), buf_(kChunk) {}
  Status walk(int dirfd, const std::string& prefix);
  uint64_t entries() const { return entries_; }

 private:
  Status add(int dirfd, const std::string& name, const std::string& path);
  Status add_dir(int dirfd, const std::string& name, const std::string& path);
  Status add_file(int dirfd, const std::string& name, const std::string& path);
  Status add_symlink(int dirfd, const std::string& name, const std::string& path,
                     const struct stat& st);
  Status add_whiteout(const std::string& path, std::string_view marker, const struct stat& st);
  Status copy_data(int fd, int64_t size, const std::string& path);
  Status header(const std::string& path, const struct stat& st, unsigned type, int64_t size,
                const char* symlink = nullptr, const char* hardlink = nullptr);
  Status unreadable(const std::string& path, int err) const {
    return Status::from_errno(
        "cannot read '" + path + "' in the container's changes (" + upper_ + ")", err);
  }

  archive* a_;
  std::string upper_;
  std::vector<char> buf_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;  // first path of each multi-link file
  uint64_t entries_ = 0;
};

// The names in DIRFD (read through a fresh fd, so DIRFD's offset is untouched), sorted.
Result<std::vector<std::string>> sorted_names(int dirfd) {
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
  if (!d) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    return Status::error("", err);
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  int err = errno;
  ::closedir(d);
  if (err) return Status::error("", err);
  std::sort(names.begin(), names.end());
  return names;
}

Status UpperWalker::walk(int dirfd, const std::string& prefix) {
  auto names = sorted_names(dirfd);
  if (!names.ok()) return unreadable(prefix.empty() ? "." : prefix, names.status().error_number());
  for (const auto& name : *names) SLIPWAY_TRY(add(dirfd, name, prefix + name));
  return Status();
}

Status UpperWalker::add(int dirfd, const std::string& name, const std::string& path) {
  // Such a name would read as a deletion in the layer (OCI image-spec layer.md).
  if (name.rfind(kWhiteoutPrefix, 0) == 0)
    return Status::error("'" + path + "' in the container's changes (" + upper_ +
                             ") has a name OCI layers reserve for deletions (.wh.*); rename it",
                         EINVAL);
  struct stat st;
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == -1)
    return unreadable(path, errno);
  switch (st.st_mode & S_IFMT) {
    case S_IFDIR:
      return add_dir(dirfd, name, path);
    case S_IFREG:
      return add_file(dirfd, name, path);
    case S_IFLNK:
      return add_symlink(dirfd, name, path, st);
    case S_IFIFO:
      return header(path, st, AE_IFIFO, 0);
    case S_IFCHR:  // overlayfs marks a deleted lower entry with a 0/0 character device
      if (st.st_rdev == makedev(0, 0)) return add_whiteout(path, {}, st);
      return Status();
    default:  // other devices and sockets are not kept (the importer would skip them anyway)
      return Status();
  }
}

Status UpperWalker::add_dir(int dirfd, const std::string& name, const std::string& path) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) == -1) return unreadable(path, errno);
  // A lower directory renamed under redirect_dir=on, whose content is found elsewhere; userxattr
  // mounts cannot enable it (overlayfs.rst), so this upper did not come from Slipway.
  if (overlay_xattr(fd.get(), "redirect"))
    return Status::error("'" + path + "' in " + upper_ + " is an overlayfs redirect " +
                             "(redirect_dir=on), which cannot be saved as a layer",
                         ENOTSUP);
  SLIPWAY_TRY(header(path, st, AE_IFDIR, 0));
  // "y": the directory replaced a lower one. ("x" only says some entries are xattr whiteouts.)
  if (overlay_xattr(fd.get(), "opaque") == "y") SLIPWAY_TRY(add_whiteout(path, kOpaqueMarker, st));
  return walk(fd.get(), path + "/");
}

Status UpperWalker::add_file(int dirfd, const std::string& name, const std::string& path) {
  constexpr int kFlags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  UniqueFd fd(::openat(dirfd, name.c_str(), kFlags));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) == -1) return unreadable(path, errno);
  if (!S_ISREG(st.st_mode))
    return Status::error("'" + path + "' in " + upper_ +
                             " changed while it was saved; stop "
                             "the container first",
                         EAGAIN);
  // A whiteout may also be an empty file with the overlay.whiteout xattr (overlayfs.rst).
  if (st.st_size == 0 && overlay_xattr(fd.get(), "whiteout")) return add_whiteout(path, {}, st);
  if (overlay_xattr(fd.get(), "metacopy"))
    return Status::error("'" + path + "' in " + upper_ + " holds metadata only (overlayfs " +
                             "metacopy=on); its data is not in the upper directory",
                         ENOTSUP);
  if (st.st_nlink > 1) {  // links to the same file inside the upper dir stay links
    auto [it, first] = links_.emplace(std::make_pair(st.st_dev, st.st_ino), path);
    if (!first) return header(path, st, AE_IFREG, 0, nullptr, it->second.c_str());
  }
  SLIPWAY_TRY(header(path, st, AE_IFREG, st.st_size));
  return copy_data(fd.get(), st.st_size, path);
}

Status UpperWalker::add_symlink(int dirfd, const std::string& name, const std::string& path,
                                const struct stat& st) {
  char target[PATH_MAX];
  ssize_t n = ::readlinkat(dirfd, name.c_str(), target, sizeof target);
  if (n < 0) return unreadable(path, errno);
  if (static_cast<size_t>(n) >= sizeof target) return unreadable(path, ENAMETOOLONG);
  target[n] = '\0';
  return header(path, st, AE_IFLNK, 0, target);
}

// ".wh.NAME" beside PATH, or MARKER (the opaque marker) inside it.
Status UpperWalker::add_whiteout(const std::string& path, std::string_view marker,
                                 const struct stat& st) {
  struct stat file = st;
  file.st_mode = S_IFREG | 0644;
  if (!marker.empty()) return header(path + "/" + std::string(marker), file, AE_IFREG, 0);
  size_t slash = path.rfind('/');
  std::string parent = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return header(parent + std::string(kWhiteoutPrefix) + base, file, AE_IFREG, 0);
}

// Writes SIZE bytes of FD: a file that shrank meanwhile is padded with zeros by libarchive, one
// that grew is cut at SIZE (the header is written already).
Status UpperWalker::copy_data(int fd, int64_t size, const std::string& path) {
  for (int64_t left = size; left > 0;) {
    ssize_t n = ::read(fd, buf_.data(), static_cast<size_t>(std::min<int64_t>(left, kChunk)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unreadable(path, errno);
    if (n == 0) break;
    if (archive_write_data(a_, buf_.data(), static_cast<size_t>(n)) != n)
      return archive_failed(a_, "write '" + path + "' into the new layer");
    left -= n;
  }
  return Status();
}

// Every entry is owned by 0:0: the image's files belong to the one mapped user, who is root
// inside the container (or maps to the job's uid, which the next import maps again).
Status UpperWalker::header(const std::string& path, const struct stat& st, unsigned type,
                           int64_t size, const char* symlink, const char* hardlink) {
  EntryPtr e(archive_entry_new());
  if (!e) return Status::error("archive_entry_new failed", ENOMEM);
  archive_entry_set_pathname(e.get(), path.c_str());
  archive_entry_set_filetype(e.get(), type);
  archive_entry_set_perm(e.get(), st.st_mode & 07777 & ~static_cast<mode_t>(S_ISUID | S_ISGID));
  archive_entry_set_uid(e.get(), 0);
  archive_entry_set_gid(e.get(), 0);
  archive_entry_set_mtime(e.get(), st.st_mtim.tv_sec, 0);
  archive_entry_set_size(e.get(), size);
  if (symlink) archive_entry_set_symlink(e.get(), symlink);
  if (hardlink) archive_entry_set_hardlink(e.get(), hardlink);
  if (archive_write_header(a_, e.get()) < ARCHIVE_WARN)
    return archive_failed(a_, "write '" + path + "' into the new layer");
  ++entries_;
  return Status();
}

struct NewLayer {
  std::string digest, diff_id;
  uint64_t size = 0, entries = 0;
  UniqueFd fd;  // the gzipped tar, in an unlinked scratch file
};

// An unlinked file beside PATH: it vanishes with its fd, whatever happens.
Result<UniqueFd> scratch_file(const std::string& path) {
  std::string name = path + ".layer-" + random_suffix();
  UniqueFd fd(::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::from_errno("create scratch file " + name, errno);
  ::unlink(name.c_str());
  return fd;
}

Result<NewLayer> build_layer(const std::string& upper, const std::string& beside) {
  UniqueFd root(::open(upper.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid())
    return Status::from_errno("open the container's upper directory " + upper, errno);
  auto scratch = scratch_file(beside);
  SLIPWAY_TRY(scratch);
  GzipBlobSink sink(scratch->get());
  WriterPtr a(archive_write_new());
  if (!a) return Status::error("archive_write_new failed", ENOMEM);
  if (archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_open2(a.get(), &sink, nullptr, sink_write, nullptr, nullptr) != ARCHIVE_OK)
    return archive_failed(a.get(), "start the new layer");
  UpperWalker walker(a.get(), upper);
  Status st = walker.walk(root.get(), "");
  if (st.ok() && archive_write_close(a.get()) != ARCHIVE_OK)
    st = archive_failed(a.get(), "finish the new layer");
  if (st.ok()) st = sink.finish();
  if (!sink.error().ok()) return sink.error();  // the cause behind libarchive's -1
  SLIPWAY_TRY(st);
  return NewLayer{sink.digest(), sink.diff_id(), sink.size(), walker.entries(),
                  std::move(*scratch)};
}

// --- (2) The image in the cache, and the new config, manifest and index ---

struct SourceImage {
  std::string digest, config_body;
  Manifest manifest;
};

Result<SourceImage> read_source_image(const NodeCache& cache, const std::string& digest) {
  const std::string dir = cache.image_dir(digest);
  const std::string fix = "; the node cache is damaged: remove the image (slipway rm " + digest +
                          ") and run the job again";
  auto body = read_small_file(dir + "/manifest.json");
  SLIPWAY_TRY(body);
  if (sha256_digest(*body) != digest)
    return Status::error(dir + "/manifest.json is not manifest " + digest + fix, EBADMSG);
  auto m = parse_manifest(*body);
  if (!m.ok()) return m.status().context(dir + "/manifest.json");
  auto config = read_small_file(dir + "/config.json");
  SLIPWAY_TRY(config);
  if (sha256_digest(*config) != m->config.digest)
    return Status::error(dir + "/config.json is not config " + m->config.digest + fix, EBADMSG);
  return SourceImage{digest, std::move(*config), std::move(*m)};
}

// The OCI media type of layer D: Docker names mapped, a missing one guessed from the blob's magic.
Result<std::string> layer_type(const NodeCache& cache, const Descriptor& d) {
  if (!d.media_type.empty()) return oci_layer_type(d.media_type);
  UniqueFd fd(::open(cache.blob_path(d.digest).c_str(), O_RDONLY | O_CLOEXEC));
  unsigned char magic[4] = {};
  if (!fd.valid() || ::pread(fd.get(), magic, sizeof magic, 0) < 0)
    return Status::from_errno("read blob " + d.digest + " in " + cache.root(), errno);
  return std::string(oci_layer_type_of_magic(magic));
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The image config with the new layer's diff_id and a history entry appended.
Result<std::string> new_config(const SourceImage& img, const NewLayer* layer) {
  json c = json::parse(img.config_body, nullptr, false);
  if (!c.is_object() || !c.contains("rootfs") || !c["rootfs"].is_object() ||
      !c["rootfs"].contains("diff_ids") || !c["rootfs"]["diff_ids"].is_array() ||
      c["rootfs"]["diff_ids"].size() != img.manifest.layers.size())
    return Status::error("the image config " + img.manifest.config.digest + " does not list " +
                             "one rootfs.diff_ids entry per layer",
                         EBADMSG);
  const std::string now = rfc3339_now();
  json entry = {{"created", now}, {"created_by", kCreatedBy}};
  if (layer)
    c["rootfs"]["diff_ids"].push_back(layer->diff_id);
  else
    entry["empty_layer"] = true;  // nothing changed: no layer (image-spec config.md, history)
  if (!c.contains("history") || !c["history"].is_array()) c["history"] = json::array();
  c["history"].push_back(std::move(entry));
  c["created"] = now;
  return dump(c);
}

Result<std::string> new_manifest(const NodeCache& cache, const SourceImage& img,
                                 const std::string& config, const NewLayer* layer) {
  std::vector<Descriptor> layers;
  for (const auto& d : img.manifest.layers) {
    auto type = layer_type(cache, d);
    SLIPWAY_TRY(type);
    layers.push_back({.media_type = *type, .digest = d.digest, .size = d.size});
  }
  if (layer)
    layers.push_back({.media_type = std::string(media::kOciLayerGzip), .digest = layer->digest,
                      .size = layer->size});
  return oci_manifest({.digest = sha256_digest(config), .size = config.size()}, layers);
}

std::string new_index(const std::string& manifest, const std::string& config) {
  Descriptor d{.digest = sha256_digest(manifest), .size = manifest.size()};
  json c = json::parse(config, nullptr, false);  // ours: valid
  if (c.is_object() && c.contains("os") && c["os"].is_string() && c.contains("architecture") &&
      c["architecture"].is_string()) {
    d.os = c["os"];
    d.architecture = c["architecture"];
  }
  return oci_index(d, "latest");
}

// --- (3) The archive ---

// A file written beside its final name and renamed into place by commit(); removed otherwise.
class PendingFile {
 public:
  static Result<PendingFile> create(const std::string& final_path) {
    PendingFile f;
    f.path_ = final_path + ".tmp-" + random_suffix();
    f.final_ = final_path;
    f.fd_.reset(::open(f.path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!f.fd_.valid()) {
      int err = errno;
      f.path_.clear();
      return Status::from_errno("create " + final_path + ".tmp-*", err);
    }
    return f;
  }
  PendingFile(PendingFile&& o) noexcept
      : path_(std::exchange(o.path_, {})), final_(std::move(o.final_)), fd_(std::move(o.fd_)) {}
  PendingFile& operator=(PendingFile&&) = delete;
  ~PendingFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  int fd() const { return fd_.get(); }
  Status commit() {
    SLIPWAY_SYS(::fsync(fd_.get()), "write " + path_);
    SLIPWAY_SYS(::rename(path_.c_str(), final_.c_str()), "rename " + path_ + " to " + final_);
    path_.clear();
    return Status();
  }

 private:
  PendingFile() = default;
  std::string path_, final_;
  UniqueFd fd_;
};

// Writes the OCI layout's files into a tar: owned by 0:0, dated now.
class LayoutTar {
 public:
  Status open(int fd) {
    if (!a_) return Status::error("archive_write_new failed", ENOMEM);
    if (archive_write_set_format_pax_restricted(a_.get()) != ARCHIVE_OK ||
        archive_write_open_fd(a_.get(), fd) != ARCHIVE_OK)
      return archive_failed(a_.get(), "start the archive");
    return Status();
  }
  Status add_dir(const std::string& name) { return header(name, AE_IFDIR, 0755, 0); }
  Status add_bytes(const std::string& name, std::string_view data) {
    SLIPWAY_TRY(header(name, AE_IFREG, 0644, data.size()));
    if (archive_write_data(a_.get(), data.data(), data.size()) !=
        static_cast<la_ssize_t>(data.size()))
      return archive_failed(a_.get(), "write " + name);
    return Status();
  }
  // Copies blob DIGEST (SIZE bytes) from FD and checks that it is what its name says.
  Status add_blob(int fd, const std::string& digest, uint64_t size, const std::string& origin);
  Status close() {
    if (archive_write_close(a_.get()) != ARCHIVE_OK)
      return archive_failed(a_.get(), "finish the archive");
    return Status();
  }

 private:
  Status header(const std::string& name, unsigned type, mode_t perm, uint64_t size) {
    EntryPtr e(archive_entry_new());
    if (!e) return Status::error("archive_entry_new failed", ENOMEM);
    archive_entry_set_pathname(e.get(), name.c_str());
    archive_entry_set_filetype(e.get(), type);
    archive_entry_set_perm(e.get(), perm);
    archive_entry_set_mtime(e.get(), now_, 0);
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
    if (archive_write_header(a_.get(), e.get()) < ARCHIVE_WARN)
      return archive_failed(a_.get(), "write " + name);
    return Status();
  }

  WriterPtr a_{archive_write_new()};
  time_t now_ = ::time(nullptr);
  std::vector<char> buf_ = std::vector<char>(kChunk);
};

Status LayoutTar::add_blob(int fd, const std::string& digest, uint64_t size,
                           const std::string& origin) {
  const std::string name = "blobs/sha256/" + digest_hex(digest);
  SLIPWAY_TRY(header(name, AE_IFREG, 0644, size));
  Sha256 hash;
  uint64_t off = 0;
  while (off < size) {
    ssize_t n = ::pread(fd, buf_.data(), std::min<uint64_t>(size - off, buf_.size()),
                        static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno("read " + origin, errno);
    if (n == 0) break;
    hash.update(buf_.data(), static_cast<size_t>(n));
    if (archive_write_data(a_.get(), buf_.data(), static_cast<size_t>(n)) != n)
      return archive_failed(a_.get(), "write " + name);
    off += static_cast<uint64_t>(n);
  }
  if (off != size || hash.finish() != digest)
    return Status::error(origin + " is not blob " + digest + " (" +
                             (off != size ? "shorter than" : "content differs from") +
                             " its manifest entry)",
                         EBADMSG);
  return Status();
}

Status add_cached_layers(LayoutTar& tar, const NodeCache& cache, const SourceImage& img) {
  const std::string fix = "; the node cache is damaged: remove the image (slipway rm " +
                          img.digest + ") and run the job again";
  std::set<std::string> done;  // an image may list one blob twice (empty layers)
  for (const auto& d : img.manifest.layers) {
    if (!done.insert(d.digest).second) continue;
    const std::string path = cache.blob_path(d.digest);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.valid()) {
      int err = errno;
      return Status::error("cannot open layer blob " + path + " (" + strerror(err) + ")" + fix,
                           err);
    }
    Status st = tar.add_blob(fd.get(), d.digest, d.size, path);
    if (st.error_number() == EBADMSG) return Status::error(st.message() + fix, EBADMSG);
    SLIPWAY_TRY(st);
  }
  return Status();
}

Status write_archive(int out, const NodeCache& cache, const SourceImage& img,
                     const NewLayer* layer) {
  auto config = new_config(img, layer);
  SLIPWAY_TRY(config);
  auto manifest = new_manifest(cache, img, *config, layer);
  SLIPWAY_TRY(manifest);
  LayoutTar tar;
  SLIPWAY_TRY(tar.open(out));
  SLIPWAY_TRY(tar.add_bytes("oci-layout", R"({"imageLayoutVersion":"1.0.0"})"));
  SLIPWAY_TRY(tar.add_bytes("index.json", new_index(*manifest, *config)));
  SLIPWAY_TRY(tar.add_dir("blobs/"));
  SLIPWAY_TRY(tar.add_dir("blobs/sha256/"));
  SLIPWAY_TRY(add_cached_layers(tar, cache, img));
  if (layer)
    SLIPWAY_TRY(tar.add_blob(layer->fd.get(), layer->digest, layer->size, "the new layer"));
  SLIPWAY_TRY(tar.add_bytes("blobs/sha256/" + digest_hex(sha256_digest(*config)), *config));
  SLIPWAY_TRY(tar.add_bytes("blobs/sha256/" + digest_hex(sha256_digest(*manifest)), *manifest));
  return tar.close();
}

Status check_request(const SnapshotRequest& req) {
  if (req.cache_dir.empty() || req.upper_dir.empty() || req.output_path.empty())
    return Status::error("the node cache, the upper directory and the output path must be given",
                         EINVAL);
  if (!is_valid_digest(req.manifest_digest))
    return Status::error("'" + req.manifest_digest + "' is not a sha256 image digest", EINVAL);
  struct stat st;
  if (req.output_path.back() == '/' ||
      (::stat(req.output_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)))
    return Status::error(req.output_path + " is a directory; give a file name (image.tar)", EISDIR);
  return Status();
}

Status save(const SnapshotRequest& req) {
  SLIPWAY_TRY(check_request(req));
  NodeCache cache(req.cache_dir);
  // Keeps `slipway gc` and `slipway rm` away from the image and its blobs while they are read.
  auto in_use = mark_in_use(cache, req.manifest_digest);
  if (!in_use.ok())
    return in_use.status().context("the container's image is gone from the node cache " +
                                   req.cache_dir);
  auto img = read_source_image(cache, req.manifest_digest);
  SLIPWAY_TRY(img);
  auto layer = build_layer(req.upper_dir, req.output_path);
  SLIPWAY_TRY(layer);
  auto out = PendingFile::create(req.output_path);
  SLIPWAY_TRY(out);
  SLIPWAY_TRY(write_archive(out->fd(), cache, *img, layer->entries ? &*layer : nullptr));
  return out->commit();
}

}  // namespace

Status save_snapshot(const SnapshotRequest& req) {
  for (LazyLibrary* lib : {&archive_library(), &crypto_library(), &isal_library()})
    if (Status st = lib->load(); !st.ok()) return st.context("cannot save the container");
  return save(req).context("cannot save the container to '" + req.output_path + "'");
}

}  // namespace slipway::launcher
