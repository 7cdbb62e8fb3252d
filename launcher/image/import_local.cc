// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// import_image() for local images, read as the calling user: OCI layout directories, and OCI
// archives and docker-archives (tar, optionally gzip or zstd compressed) as `skopeo copy` writes
// them. An archive is read twice at most: once for its small files (index.json, manifest.json,
// manifests, configs), which are enough to know the digest and find the image cached; once more
// to copy the missing layers into blobs/, verified by sha256 as they stream. Paths and digests in
// the archive's JSON are hostile input like any registry's.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "image/archive_lazy.h"
#include "image/digest.h"
#include "image/fs_beneath.h"
#include "image/import_build.h"
#include "image/import_squashfs.h"

namespace slipway::launcher {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxSmallFile = 8 << 20;    // manifests and configs are far smaller
constexpr uint64_t kMaxSmallTotal = 64 << 20;  // all small files of one archive together
constexpr int kMaxIndexDepth = 3;

// A wanted file of the image and the blob it must be.
struct WantedBlob {
  std::string name;
  Descriptor desc;
};

// Streams chunks from READ (returns bytes, 0 at the end, -1 on error with *why) into FD,
// checking size and sha256 against D.
Status copy_verified(const std::function<ssize_t(const void**, std::string*)>& read, int fd,
                     const Descriptor& d, const std::string& what) {
  Sha256 hash;
  uint64_t got = 0;
  for (;;) {
    const void* p = nullptr;
    std::string why;
    ssize_t n = read(&p, &why);
    if (n < 0) return Status::error("cannot read " + what + ": " + why, EIO);
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
    if (got > d.size) break;
    hash.update(p, static_cast<size_t>(n));
    for (size_t done = 0; done < static_cast<size_t>(n);) {
      ssize_t w = ::write(fd, static_cast<const char*>(p) + done, static_cast<size_t>(n) - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Status::from_errno("write blob " + d.digest, errno);
      done += static_cast<size_t>(w);
    }
  }
  std::string actual = got == d.size ? hash.finish() : "";
  if (actual != d.digest)
    return Status::error(what + " is not blob " + d.digest + " (" +
                             (got == d.size ? "digest " + actual : "size differs") +
                             "); the image is corrupt: export it again",
                         EBADMSG);
  return Status();
}

// Where the files of a local image come from.
class LocalSource {
 public:
  virtual ~LocalSource() = default;
  virtual Result<std::string> read_small(const std::string& name) = 0;  // up to kMaxSmallFile
  virtual Result<uint64_t> size_of(const std::string& name) = 0;
  virtual bool has(const std::string& name) = 0;
  // Puts every WANTED file into blobs/ (verified) unless the blob is there already.
  virtual Status copy_blobs(const NodeCache& cache, const std::vector<WantedBlob>& wanted) = 0;
};

// An OCI layout directory (or an unpacked docker-archive).
class DirSource : public LocalSource {
 public:
  DirSource(UniqueFd dir, std::string path) : dir_(std::move(dir)), path_(std::move(path)) {}

  // NAME in the layout, which must be a regular file: opened with O_NONBLOCK so that a FIFO (or
  // a device) put in a blob's place is refused at once instead of blocking the import forever.
  Result<UniqueFd> open_file(const std::string& name) {
    UniqueFd fd(::openat(dir_.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid()) return Status::from_errno(path_ + "/" + name, errno);
    struct stat st;
    SLIPWAY_SYS(::fstat(fd.get(), &st), path_ + "/" + name);
    if (!S_ISREG(st.st_mode))
      return Status::error(path_ + "/" + name + " is not a regular file (" +
                               (S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "a special file") +
                               "); the image is corrupt: export it again",
                           EINVAL);
    SLIPWAY_SYS(::fcntl(fd.get(), F_SETFL, 0), path_ + "/" + name);
    return fd;
  }

  Result<std::string> read_small(const std::string& name) override {
    Result<UniqueFd> opened = open_file(name);
    SLIPWAY_TRY(opened.status());
    UniqueFd fd = std::move(*opened);
    std::string out;
    char buf[65536];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::from_errno("read " + path_ + "/" + name, errno);
      out.append(buf, static_cast<size_t>(n));
      if (out.size() > kMaxSmallFile)
        return Status::error(path_ + "/" + name + " is too large for a manifest", EFBIG);
    }
    return out;
  }
  Result<uint64_t> size_of(const std::string& name) override {
    struct stat st;
    SLIPWAY_SYS(::fstatat(dir_.get(), name.c_str(), &st, 0), path_ + "/" + name);
    return static_cast<uint64_t>(st.st_size);
  }
  bool has(const std::string& name) override {
    return ::faccessat(dir_.get(), name.c_str(), F_OK, 0) == 0;
  }
  Status copy_blobs(const NodeCache& cache, const std::vector<WantedBlob>& wanted) override {
    for (const auto& w : wanted) {
      SLIPWAY_TRY(ensure_blob(cache, w.desc, [&](int out) -> Status {
        Result<UniqueFd> opened = open_file(w.name);
        if (!opened.ok()) return opened.status();  // (SLIPWAY_TRY would shadow the outer one)
        UniqueFd in = std::move(*opened);
        std::vector<char> buf(1 << 20);
        auto read = [&](const void** p, std::string* why) -> ssize_t {
          ssize_t n;
          do n = ::read(in.get(), buf.data(), buf.size());
          while (n < 0 && errno == EINTR);
          if (n < 0) *why = strerror(errno);
          *p = buf.data();
          return n;
        };
        return copy_verified(read, out, w.desc, path_ + "/" + w.name);
      }));
    }
    return Status();
  }

 private:
  UniqueFd dir_;
  std::string path_;
};

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

// An OCI archive or docker-archive: a tar of the layout, maybe compressed.
class ArchiveSource : public LocalSource {
 public:
  ArchiveSource(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}

  // Pass 1: every regular file's size, and the small ones' bytes.
  Status load() {
    uint64_t kept = 0;
    return each_entry([&](archive* a, const std::string& name, archive_entry* e) -> Status {
      uint64_t size = static_cast<uint64_t>(std::max<la_int64_t>(0, archive_entry_size(e)));
      sizes_[name] = size;
      if (size > kMaxSmallFile || kept + size > kMaxSmallTotal) return Status();
      std::string data(size, '\0');
      for (size_t got = 0; got < size;) {
        la_ssize_t n = archive_read_data(a, data.data() + got, size - got);
        if (n <= 0) return corrupt(a, name);
        got += static_cast<size_t>(n);
      }
      kept += size;
      small_[name] = std::move(data);
      return Status();
    });
  }
  Result<std::string> read_small(const std::string& name) override {
    auto it = small_.find(name);
    if (it != small_.end()) return it->second;
    return Status::error("'" + name + "' is missing in image archive " + path_ +
                             (sizes_.count(name) ? " (or too large)" : ""),
                         ENOENT);
  }
  Result<uint64_t> size_of(const std::string& name) override {
    auto it = sizes_.find(name);
    if (it == sizes_.end())
      return Status::error("'" + name + "' is missing in image archive " + path_, ENOENT);
    return it->second;
  }
  bool has(const std::string& name) override { return sizes_.count(name) != 0; }

  // Pass 2: the wanted files, streamed into blobs/.
  Status copy_blobs(const NodeCache& cache, const std::vector<WantedBlob>& wanted) override {
    std::map<std::string, const WantedBlob*> by_name;
    for (const auto& w : wanted) by_name[w.name] = &w;
    if (by_name.empty()) return Status();
    SLIPWAY_TRY(each_entry([&](archive* a, const std::string& name, archive_entry*) -> Status {
      auto it = by_name.find(name);
      if (it == by_name.end()) return Status();
      const WantedBlob& w = *it->second;
      by_name.erase(it);
      return ensure_blob(cache, w.desc, [&](int out) {
        auto read = [&](const void** p, std::string* why) -> ssize_t {
          size_t n = 0;
          la_int64_t off = 0;
          int r = archive_read_data_block(a, p, &n, &off);
          if (r == ARCHIVE_EOF) return 0;
          if (r != ARCHIVE_OK) {
            const char* m = archive_error_string(a);
            *why = m ? m : "corrupt archive";
            return -1;
          }
          return static_cast<ssize_t>(n);
        };
        return copy_verified(read, out, w.desc, "'" + w.name + "' in " + path_);
      });
    }));
    for (const auto& [name, w] : by_name)
      if (::access(cache.blob_path(w->desc.digest).c_str(), F_OK) != 0)
        return Status::error("'" + name + "' is missing in image archive " + path_ +
                                 "; the archive changed while it was read",
                             ENOENT);
    return Status();
  }

 private:
  Status corrupt(archive* a, const std::string& where) {
    const char* m = archive_error_string(a);
    return Status::error("image archive " + path_ + " is corrupt or truncated (" + where + ": " +
                             (m ? m : "read error") + "); export it again",
                         EBADMSG);
  }

  // Calls FN for every regular file entry, with its clean name; FN may read its data.
  template <class Fn>
  Status each_entry(Fn fn) {
    if (::lseek(fd_.get(), 0, SEEK_SET) == -1) return Status::from_errno("seek " + path_, errno);
    ArchivePtr a(archive_read_new());
    if (!a) return Status::error("archive_read_new failed", ENOMEM);
    archive_read_support_format_tar(a.get());
    archive_read_support_filter_gzip(a.get());
    archive_read_support_filter_zstd(a.get());
    if (archive_read_open_fd(a.get(), fd_.get(), 1 << 20) != ARCHIVE_OK)
      return corrupt(a.get(), "open");
    for (;;) {
      archive_entry* e = nullptr;
      int r = archive_read_next_header(a.get(), &e);
      if (r == ARCHIVE_EOF) return Status();
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return corrupt(a.get(), "header");
      if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e)) continue;
      const char* raw = archive_entry_pathname(e);
      auto name = clean_entry_path(raw ? raw : "");
      if (!name.ok() || name->empty()) continue;  // such names are never looked up
      SLIPWAY_TRY(fn(a.get(), *name, e));
    }
  }

  UniqueFd fd_;
  std::string path_;
  std::map<std::string, uint64_t> sizes_;
  std::map<std::string, std::string> small_;
};

// What the import needs from a local image, verified.
struct LocalImage {
  std::string manifest_body, manifest_digest, config_body;
  Manifest manifest;
  std::vector<std::string> layer_names;  // where layer i is in the source
};

std::string blob_name(const std::string& digest) { return "blobs/sha256/" + digest_hex(digest); }

// The blob D names, checked against D's digest and declared size (a registry's blobs are too).
Result<std::string> read_verified(LocalSource& src, const Descriptor& d, const std::string& image) {
  auto body = src.read_small(blob_name(d.digest));
  if (!body.ok()) return body.status().context("image '" + image + "'");
  if (sha256_digest(*body) != d.digest)
    return Status::error("image '" + image + "': " + blob_name(d.digest) +
                             " does not match its digest; the image is corrupt: export it again",
                         EBADMSG);
  if (body->size() != d.size)
    return Status::error("image '" + image + "': " + blob_name(d.digest) + " is " +
                             std::to_string(body->size()) + " bytes, its descriptor declares " +
                             std::to_string(d.size) + "; the image is corrupt: export it again",
                         EBADMSG);
  return body;
}

// The one image of an index: its only entry, else the linux/amd64 one; nested indexes followed.
Result<Descriptor> choose_manifest(LocalSource& src, const std::string& index_body,
                                   const std::string& image, int depth) {
  json j = json::parse(index_body, nullptr, false);
  if (!j.is_object() || !j.contains("manifests") || !j["manifests"].is_array() ||
      j["manifests"].empty())
    return Status::error("image '" + image + "': index.json lists no image; it is not an OCI "
                         "image layout", EINVAL);
  Result<Descriptor> d = Status::error("unset");
  if (j["manifests"].size() == 1) {
    json wrapped = {{"manifests", j["manifests"]}};
    wrapped["manifests"][0]["platform"] = {{"os", "linux"}, {"architecture", "amd64"}};
    d = pick_platform(wrapped.dump());
  } else {
    d = pick_platform(index_body);
  }
  if (!d.ok()) return d.status().context("image '" + image + "'");
  if (d->media_type != media::kOciIndex && d->media_type != media::kDockerList) return d;
  if (depth >= kMaxIndexDepth)
    return Status::error("image '" + image + "': indexes nest too deep", EINVAL);
  auto nested = read_verified(src, *d, image);
  SLIPWAY_TRY(nested);
  return choose_manifest(src, *nested, image, depth + 1);
}

Result<LocalImage> read_oci_layout(LocalSource& src, const std::string& image) {
  auto index = src.read_small("index.json");
  SLIPWAY_TRY(index);
  auto d = choose_manifest(src, *index, image, 0);
  SLIPWAY_TRY(d);
  LocalImage img;
  auto body = read_verified(src, *d, image);
  SLIPWAY_TRY(body);
  auto m = parse_manifest(*body);
  if (!m.ok()) return m.status().context("image '" + image + "'");
  auto config = read_verified(src, m->config, image);
  SLIPWAY_TRY(config);
  img.manifest_body = std::move(*body);
  img.manifest_digest = d->digest;
  img.config_body = std::move(*config);
  img.manifest = std::move(*m);
  for (const auto& l : img.manifest.layers) img.layer_names.push_back(blob_name(l.digest));
  return img;
}

// A docker-archive has no manifest: make the OCI manifest its config and layers imply (layers
// are uncompressed tars whose sha256 are the config's rootfs.diff_ids), so the same archive
// always gets the same digest.
Result<LocalImage> read_docker_archive(LocalSource& src, const std::string& image) {
  const std::string bad = "image '" + image + "': manifest.json of the docker-archive ";
  auto listing = src.read_small("manifest.json");
  SLIPWAY_TRY(listing);
  json j = json::parse(*listing, nullptr, false);
  if (!j.is_array() || j.size() != 1 || !j[0].is_object() || !j[0].contains("Config") ||
      !j[0]["Config"].is_string() || !j[0].contains("Layers") || !j[0]["Layers"].is_array())
    return Status::error(bad + "must describe exactly one image (Config, Layers)", EINVAL);
  auto config_name = clean_entry_path(j[0]["Config"].get<std::string>());
  if (!config_name.ok()) return config_name.status().context(bad.substr(0, bad.size() - 1));
  auto config = src.read_small(*config_name);
  if (!config.ok()) return config.status().context("image '" + image + "'");
  json c = json::parse(*config, nullptr, false);
  if (!c.is_object() || !c.contains("rootfs") || !c["rootfs"].is_object() ||
      !c["rootfs"].contains("diff_ids") || !c["rootfs"]["diff_ids"].is_array() ||
      c["rootfs"]["diff_ids"].size() != j[0]["Layers"].size())
    return Status::error(bad + "and its config disagree on the layers", EINVAL);
  LocalImage img;
  json m = {{"schemaVersion", 2},
            {"mediaType", media::kOciManifest},
            {"config",
             {{"mediaType", "application/vnd.oci.image.config.v1+json"},
              {"digest", sha256_digest(*config)},
              {"size", config->size()}}},
            {"layers", json::array()}};
  for (size_t i = 0; i < j[0]["Layers"].size(); ++i) {
    const json& name = j[0]["Layers"][i];
    const json& diff_id = c["rootfs"]["diff_ids"][i];
    auto clean = clean_entry_path(name.is_string() ? name.get<std::string>() : "");
    if (!clean.ok() || clean->empty() || !diff_id.is_string() ||
        !is_valid_digest(diff_id.get<std::string>()))
      return Status::error(bad + "has a bad layer entry " + std::to_string(i + 1), EINVAL);
    auto size = src.size_of(*clean);
    if (!size.ok()) return size.status().context("image '" + image + "'");
    m["layers"].push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                           {"digest", diff_id.get<std::string>()},
                           {"size", *size}});
    img.layer_names.push_back(*clean);
  }
  img.manifest_body = m.dump();
  img.manifest_digest = sha256_digest(img.manifest_body);
  img.config_body = std::move(*config);
  auto parsed = parse_manifest(img.manifest_body);
  SLIPWAY_TRY(parsed);
  img.manifest = std::move(*parsed);
  return img;
}

// Opens PATH as the calling user: a directory is a layout, a file an archive.
Result<std::unique_ptr<LocalSource>> open_source(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO is refused
  if (fd.valid()) (void)::fcntl(fd.get(), F_SETFL, 0);  // reads of a file or directory as usual
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) == -1) {
    int err = errno;
    std::string fix = err == ENOENT ? "check the path"
                      : err == EACCES ? "the job's user (uid " + std::to_string(::geteuid()) +
                                           ") must be able to read it"
                      : err == ENAMETOOLONG ? "the path is longer than the system allows"
                                      : "check the file";
    return Status::error("cannot open image '" + path + "': " + strerror(err) + "; " + fix, err);
  }
  if (S_ISDIR(st.st_mode)) return std::unique_ptr<LocalSource>(new DirSource(std::move(fd), path));
  if (!S_ISREG(st.st_mode))
    return Status::error("image '" + path + "' is neither a file nor a directory", EINVAL);
  auto src = std::make_unique<ArchiveSource>(std::move(fd), path);
  SLIPWAY_TRY(src->load());
  return std::unique_ptr<LocalSource>(std::move(src));
}

Result<LocalImage> read_local(LocalSource& src, const std::string& image) {
  if (src.has("index.json")) return read_oci_layout(src, image);
  if (src.has("manifest.json")) return read_docker_archive(src, image);
  return Status::error("image '" + image + "' is neither an OCI layout or archive (no index.json) "
                       "nor a docker-archive (no manifest.json); write it with 'skopeo copy'",
                       EINVAL);
}

}  // namespace

Result<ImportedImage> import_local_image(const ImageRef& ref, const ImportOptions& opts) {
  NodeCache cache(opts.cache_dir);
  SLIPWAY_TRY(cache.ensure_layout());
  Progress progress(opts.progress);
  // What errors and `slipway images` call it: the path, or what it was exported from.
  const std::string image = ref.origin.empty() ? ref.path : ref.origin;
  progress.report("reading " + image);
  {
    // enroot's squashfs images (what pyxis users have on disk) take their own path, which loads
    // libarchive and libcrypto only when the image is not cached.
    // O_NONBLOCK: a FIFO given as the image must not hang the step (it is refused below).
    UniqueFd fd(::open(ref.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    struct stat st;
    if (fd.valid() && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && is_squashfs(fd.get())) {
      if (std::string why = squashfs_damage(ref.path, fd.get()); !why.empty())
        return Status::error(why, EBADMSG);
      if (opts.mount_squashfs) return squashfs_image_to_mount(ref.path, fd.get());
      if (!opts.why_not_mount.empty() && opts.registry.warn)
        opts.registry.warn("squashfs image '" + image + "' is unpacked, not mounted: " +
                           opts.why_not_mount);
      return import_squashfs_image(ref.path, fd.get(), opts, progress);
    }
  }
  SLIPWAY_TRY(archive_library().load());
  SLIPWAY_TRY(crypto_library().load());
  auto src = open_source(ref.path);
  SLIPWAY_TRY(src);
  auto local = read_local(**src, image);
  SLIPWAY_TRY(local);
  const std::string& key = local->manifest_digest;
  if (auto img = cached_and_touched(cache, key); img.ok()) return img;
  BuildPlan plan;
  plan.lock_key = digest_hex(key);
  auto lock = FileLock::acquire(cache.lock_path(plan.lock_key), FileLock::Mode::kExclusive);
  SLIPWAY_TRY(lock);
  auto blobs = hold_blobs(cache);  // no gc or rm sweeps our blobs before we publish
  SLIPWAY_TRY(blobs);
  if (auto img = cached_and_touched(cache, key); img.ok()) return img;  // imported meanwhile
  SLIPWAY_TRY(cache.remove_stale_tmp(plan.lock_key));
  auto config = parse_image_config(local->config_body);
  if (!config.ok()) return config.status().context("image '" + image + "'");
  std::vector<WantedBlob> wanted;
  for (size_t i = 0; i < local->manifest.layers.size(); ++i)
    wanted.push_back({local->layer_names[i], local->manifest.layers[i]});
  progress.report("copying the layers of " + image);
  Status copied = (*src)->copy_blobs(cache, wanted);
  if (!copied.ok()) return with_fix(copied, cache);
  plan.image = image;
  plan.manifest_body = std::move(local->manifest_body);
  plan.manifest_digest = key;
  plan.config_body = std::move(local->config_body);
  plan.manifest = std::move(local->manifest);
  plan.config = std::move(*config);
  LayerFetch present = [&](size_t i, size_t) -> Status {
    const std::string& d = plan.manifest.layers[i].digest;
    if (::access(cache.blob_path(d).c_str(), F_OK) == 0) return Status();
    return Status::error("blob " + d + " of image '" + image + "' vanished from the cache " +
                             cache.root() + " during the import; retry",
                         ENOENT);
  };
  return build_and_publish(cache, plan, present, 1, opts, progress);
}

Result<std::string> read_local_archive(int fd, const std::string& image) {
  SLIPWAY_TRY(archive_library().load());
  SLIPWAY_TRY(crypto_library().load());
  UniqueFd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!own.valid()) return Status::from_errno("dup " + image, errno);
  ArchiveSource src(std::move(own), image);
  SLIPWAY_TRY(src.load());
  auto local = read_local(src, image);
  SLIPWAY_TRY(local);
  auto config = parse_image_config(local->config_body);
  SLIPWAY_TRY(config);
  return local->manifest_digest;
}

}  // namespace slipway::launcher
