// import_image(): cache look-up without a lock, then under the image's lock: fetch the manifest,
// fetch missing blobs (each under its own lock, verified, renamed into blobs/), unpack the layers
// into a private tmp/ directory and publish it with one rename(2). See cache.h for the layout.
#include "image/import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <optional>

#include "image/digest.h"
#include "image/fs_beneath.h"
#include "image/layer.h"

namespace slipway::launcher {
namespace {

// Calls the user's progress function at most once a second.
class Progress {
 public:
  explicit Progress(const std::function<void(std::string_view)>& fn) : fn_(fn) {}
  void report(const std::string& line) {
    if (!fn_) return;
    auto now = std::chrono::steady_clock::now();
    if (called_ && now - last_ < std::chrono::seconds(1)) return;
    called_ = true;
    last_ = now;
    fn_(line);
  }

 private:
  const std::function<void(std::string_view)>& fn_;
  bool called_ = false;
  std::chrono::steady_clock::time_point last_;
};

Result<std::string> read_file(const std::string& path, size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return Status::from_errno("open " + path, errno);
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno("read " + path, errno);
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max) return Status::error(path + " is too large", EFBIG);
  }
  return out;
}

Status write_new_file(const std::string& path, std::string_view data) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::from_errno("create " + path, errno);
  for (size_t done = 0; done < data.size();) {
    ssize_t w = ::write(fd.get(), data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::from_errno("write " + path, errno);
    done += static_cast<size_t>(w);
  }
  return Status();
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Adds what the user should do to an unpack or download error, by its cause.
Status with_fix(const Status& st, const NodeCache& cache) {
  switch (st.error_number()) {
    case ENOSPC:
    case EDQUOT:
      return Status::error(st.message() + "; free space in " + cache.root() +
                               " (slipway gc --keep SIZE) or choose another cache directory",
                           st.error_number());
    case EPERM: case EINVAL: case ELOOP: case ENOTDIR: case EBADMSG: case ENOENT: case EEXIST:
      return Status::error(st.message() + "; the image is corrupt or malicious: rebuild it from "
                               "a trusted source", st.error_number());
    default:
      return st;
  }
}

// Makes sure blob D is in blobs/: downloaded once per node even by concurrent importers.
Status ensure_blob(const NodeCache& cache, RegistryClient& client, const Descriptor& d) {
  const std::string path = cache.blob_path(d.digest);
  if (exists(path)) return Status();
  const std::string key = "blob-" + digest_hex(d.digest);
  auto lock = FileLock::acquire(cache.lock_path(key), FileLock::Mode::kExclusive);
  SLIPWAY_TRY(lock);
  if (exists(path)) return Status();
  SLIPWAY_TRY(cache.remove_stale_tmp(key));
  std::string tmp = cache.tmp_dir() + "/" + key + "." + std::to_string(::getpid()) + "." +
                    random_suffix();
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::from_errno("create " + tmp, errno);
  Status st = client.fetch_blob(d, fd.get());
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) == -1)
    st = Status::from_errno("rename " + tmp + " to " + path, errno);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Status unpack_layers(const NodeCache& cache, const Manifest& m, const std::string& rootfs,
                     const ImportOptions& opts, Progress& progress, const std::string& image) {
  SLIPWAY_SYS(::mkdir(rootfs.c_str(), 0755), "create " + rootfs);
  UniqueFd rootfd(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rootfd.valid()) return Status::from_errno("open " + rootfs, errno);
  UnpackBudget budget{opts.max_unpacked_bytes, 0};
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const Descriptor& d = m.layers[i];
    progress.report("unpacking layer " + std::to_string(i + 1) + "/" +
                    std::to_string(m.layers.size()) + " of " + image);
    UniqueFd fd(::open(cache.blob_path(d.digest).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return Status::from_errno("open blob " + d.digest, errno);
    Status st = apply_layer(rootfd.get(), fd.get(), budget);
    if (!st.ok())
      return with_fix(st.context("image '" + image + "', layer " + std::to_string(i + 1) + "/" +
                                 std::to_string(m.layers.size()) + " (" + d.digest + ")"),
                      cache);
  }
  return Status();
}

// Everything after the manifest, under the image lock LOCK_KEY: blobs, unpack, publish.
Result<ImportedImage> build_image(const NodeCache& cache, RegistryClient& client,
                                  const FetchedManifest& fm, const std::string& lock_key,
                                  const ImportOptions& opts, Progress& progress) {
  const std::string image = client.ref().str();
  auto m = parse_manifest(fm.body);
  if (!m.ok()) return m.status().context("image '" + image + "'");
  auto config = client.fetch_small_blob(m->config);
  SLIPWAY_TRY(config);
  auto parsed = parse_image_config(*config);
  if (!parsed.ok()) return parsed.status().context("image '" + image + "'");
  for (size_t i = 0; i < m->layers.size(); ++i) {
    progress.report("fetching layer " + std::to_string(i + 1) + "/" +
                    std::to_string(m->layers.size()) + " of " + image);
    Status st = ensure_blob(cache, client, m->layers[i]);
    if (!st.ok()) return with_fix(st, cache);
  }
  auto tmp = cache.make_tmp_dir(lock_key);
  SLIPWAY_TRY(tmp);
  Status st = unpack_layers(cache, *m, *tmp + "/rootfs", opts, progress, image);
  if (st.ok()) st = write_new_file(*tmp + "/config.json", *config);
  if (st.ok()) st = write_new_file(*tmp + "/manifest.json", fm.body);
  const std::string dest = cache.image_dir(fm.digest);
  if (st.ok() && ::rename(tmp->c_str(), dest.c_str()) == -1 && errno != ENOTEMPTY &&
      errno != EEXIST)
    st = with_fix(Status::from_errno("publish " + dest, errno), cache);
  if (exists(*tmp)) {  // failed, or lost the publish race to an importer under another key
    size_t slash = tmp->rfind('/');
    UniqueFd dir(::open(cache.tmp_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.valid()) (void)remove_tree_at(dir.get(), tmp->c_str() + slash + 1);
  }
  SLIPWAY_TRY(st);
  auto img = find_cached_image(cache, fm.digest);
  if (img.ok()) img->was_cached = false;
  return img;
}

Result<ImportedImage> cached_and_touched(const NodeCache& cache, const std::string& digest) {
  auto img = find_cached_image(cache, digest);
  if (img.ok()) ::utimensat(AT_FDCWD, cache.image_dir(digest).c_str(), nullptr, 0);  // last use
  return img;
}

}  // namespace

Result<ImportedImage> find_cached_image(const NodeCache& cache, std::string_view digest) {
  if (!is_valid_digest(digest))
    return Status::error("'" + std::string(digest) + "' is not a sha256 digest", EINVAL);
  const std::string dir = cache.image_dir(digest);
  auto config = read_file(dir + "/config.json", 8 << 20);
  SLIPWAY_TRY(config);
  auto parsed = parse_image_config(*config);
  SLIPWAY_TRY(parsed);
  return ImportedImage{std::string(digest), dir + "/rootfs", std::move(*parsed), true};
}

Result<ImportedImage> import_image(const ImageRef& ref, const ImportOptions& opts) {
  if (ref.kind != ImageRef::Kind::kRegistry)
    return Status::error("importing local image '" + ref.str() + "' is not supported yet",
                         ENOTSUP);
  NodeCache cache(opts.cache_dir);
  SLIPWAY_TRY(cache.ensure_layout());
  Progress progress(opts.progress);
  RegistryClient client(ref, opts.registry);
  std::optional<FetchedManifest> fm;
  std::string key = ref.digest;
  if (key.empty()) {
    auto m = client.fetch_platform_manifest();
    SLIPWAY_TRY(m);
    key = m->digest;
    fm = std::move(*m);
  }
  if (auto img = cached_and_touched(cache, key); img.ok()) return img;
  const std::string lock_key = digest_hex(key);
  auto lock = FileLock::acquire(cache.lock_path(lock_key), FileLock::Mode::kExclusive);
  SLIPWAY_TRY(lock);
  if (auto img = cached_and_touched(cache, key); img.ok()) return img;  // imported meanwhile
  SLIPWAY_TRY(cache.remove_stale_tmp(lock_key));
  if (!fm) {
    auto m = client.fetch_platform_manifest();
    SLIPWAY_TRY(m);
    fm = std::move(*m);
    if (fm->digest != key)  // REF.digest named an index: the image is its linux/amd64 entry
      if (auto img = cached_and_touched(cache, fm->digest); img.ok()) return img;
  }
  return build_image(cache, client, *fm, lock_key, opts, progress);
}

}  // namespace slipway::launcher
