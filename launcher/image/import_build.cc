// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// build_and_publish() and its helpers (see import_build.h). Layers are fetched by a small pool of
// threads while the calling thread unpacks them in order: layer i is unpacked as soon as it is in
// blobs/, while layers i+1.. still download, so a pull costs about max(download, unpack), not the
// sum (docs/performance.md, "Importing an image").
#include "image/import_build.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "image/digest.h"
#include "image/fs_beneath.h"
#include "image/layer.h"
#include "common/text.h"

namespace slipway::launcher {
namespace {

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

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

std::string megabytes(uint64_t bytes) {
  return std::to_string((bytes + (1 << 19)) >> 20) + " MB";
}

// Runs FETCH for every layer on up to PARALLEL threads, in layer order; wait_for(i) blocks until
// layer i is done. After a failure no new fetch starts; the destructor joins the threads.
class LayerPool {
 public:
  LayerPool(size_t layers, size_t parallel, const LayerFetch& fetch)
      : fetch_(fetch), status_(layers), done_(layers, false) {
    size_t n = std::max<size_t>(1, std::min(parallel, layers));
    for (size_t w = 0; w < n && layers > 0; ++w) threads_.emplace_back([this, w] { run(w); });
  }
  ~LayerPool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    for (auto& t : threads_) t.join();
  }
  LayerPool(const LayerPool&) = delete;
  LayerPool& operator=(const LayerPool&) = delete;

  Status wait_for(size_t i) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return done_[i]; });
    return status_[i];
  }

 private:
  void run(size_t worker) {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stop_ || next_ >= done_.size()) return;
        i = next_++;
      }
      Status st = fetch_(i, worker);
      std::lock_guard<std::mutex> l(mu_);
      status_[i] = std::move(st);
      done_[i] = true;
      if (!status_[i].ok()) stop_ = true;
      if (stop_)  // layers nobody will fetch now: wake their waiters with an error
        for (size_t k = next_; k < done_.size(); ++k) {
          if (!done_[k]) status_[k] = Status::error("import stopped after an error", ECANCELED);
          done_[k] = true;
        }
      cv_.notify_all();
    }
  }

  const LayerFetch& fetch_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Status> status_;
  std::vector<bool> done_;
  size_t next_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// The first failed layer's status, not the "stopped" ones after it.
Status first_error(LayerPool& pool, size_t upto, const Status& st) {
  for (size_t k = 0; k < upto; ++k) {
    Status s = pool.wait_for(k);
    if (!s.ok() && s.error_number() != ECANCELED) return s;
  }
  return st;
}

Status unpack_all(const NodeCache& cache, const BuildPlan& plan, LayerPool& pool,
                  const std::string& rootfs, const ImportOptions& opts, Progress& progress) {
  SLIPWAY_SYS(::mkdir(rootfs.c_str(), 0755), "create " + rootfs);
  UniqueFd rootfd(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rootfd.valid()) return Status::from_errno("open " + rootfs, errno);
  UnpackBudget budget;
  budget.max_bytes = opts.bounds.max_image_bytes;
  budget.max_ratio = opts.bounds.max_layer_ratio;
  budget.min_free_bytes = opts.bounds.min_free_bytes;
  const auto& layers = plan.manifest.layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string of = std::to_string(i + 1) + "/" + std::to_string(layers.size());
    progress.report("fetching layer " + of + " of " + plan.image + " (" +
                    megabytes(layers[i].size) + ")");
    Status st = pool.wait_for(i);
    if (!st.ok()) return first_error(pool, layers.size(), st);
    progress.report("unpacking layer " + of + " of " + plan.image);
    UniqueFd fd(::open(cache.blob_path(layers[i].digest).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return Status::from_errno("open blob " + layers[i].digest, errno);
    st = apply_layer(rootfd.get(), fd.get(), budget);
    if (!st.ok())
      return with_fix(st.context("image '" + plan.image + "', layer " + of + " (" +
                                 layers[i].digest + ")"),
                      cache);
  }
  return Status();
}

// Deletes tmp/<name> (a failed build, or one that lost the publish race).
void remove_tmp(const NodeCache& cache, const std::string& tmp) {
  if (!exists(tmp)) return;
  UniqueFd dir(::open(cache.tmp_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid()) (void)remove_tree_at(dir.get(), tmp.c_str() + tmp.rfind('/') + 1);
}

}  // namespace

Status check_declared_sizes(const NodeCache& cache, const BuildPlan& plan,
                            const ImportBounds& bounds) {
  auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  uint64_t declared = plan.manifest.config.size, missing = 0;
  for (const auto& layer : plan.manifest.layers) {
    declared = add(declared, layer.size);
    if (!exists(cache.blob_path(layer.digest))) missing = add(missing, layer.size);
  }
  if (declared > bounds.max_image_bytes)
    return Status::error("image '" + plan.image + "' declares " + human_bytes(declared) +
                             " of blobs, more than it may unpack to (" +
                             bound_text("max_image_size", human_bytes(bounds.max_image_bytes)) +
                             "); it is too large for this site, or hostile",
                         EFBIG);
  struct statvfs vfs;
  if (::statvfs(cache.root().c_str(), &vfs) == -1)
    return Status::from_errno("statvfs " + cache.root(), errno);
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (add(missing, bounds.min_free_bytes) > avail)
    return with_fix(Status::error("image '" + plan.image + "' needs " + human_bytes(missing) +
                                      " of downloads, but " + cache.root() + " has " +
                                      human_bytes(avail) + " free and must keep " +
                                      bound_text("min_free_space",
                                                 human_bytes(bounds.min_free_bytes)),
                                  ENOSPC),
                    cache);
  return Status();
}

namespace {
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Progress::Progress(const std::function<void(std::string_view)>& fn) : fn_(fn), last_ms_(now_ms()) {}

void Progress::report(const std::string& line) {
  if (!fn_) return;
  int64_t now = now_ms();
  if (now - last_ms_ < 1000) return;
  last_ms_ = now;
  fn_(line);
}

Status with_fix(const Status& st, const NodeCache& cache) {
  switch (st.error_number()) {
    case ENOSPC:
    case EDQUOT:
      return Status::error(st.message() + "; free space in " + cache.root() +
                               " (slipway gc --keep SIZE) or choose another cache directory",
                           st.error_number());
    case EPERM: case EINVAL: case ELOOP: case ENOTDIR: case EBADMSG: case ENOENT: case EEXIST:
      if (st.message().find("; the image is corrupt") != std::string::npos) return st;  // said
      return Status::error(st.message() + "; the image is corrupt or malicious: rebuild it from "
                               "a trusted source", st.error_number());
    default:
      return st;
  }
}

namespace {

// Bytes in tmp/ files named KEY.* (another importer's download of that blob).
uint64_t tmp_bytes(const NodeCache& cache, const std::string& key) {
  uint64_t total = 0;
  DIR* dir = ::opendir(cache.tmp_dir().c_str());
  if (!dir) return 0;
  while (dirent* e = ::readdir(dir)) {
    struct stat st;
    if (std::string_view(e->d_name).rfind(key + ".", 0) == 0 &&
        ::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_size);
  }
  ::closedir(dir);
  return total;
}

using Clock = std::chrono::steady_clock;

// The blob lock KEY, waiting while its holder's download keeps within WAIT.
Result<FileLock> wait_for_blob_lock(const NodeCache& cache, const Descriptor& d,
                                    const std::string& key, const BlobWait& wait) {
  const std::string path = cache.lock_path(key);
  if (wait.deadline == Clock::time_point::max() && wait.min_rate == 0)
    return FileLock::acquire(path, FileLock::Mode::kExclusive);
  const auto start = Clock::now();
  auto window_start = start;
  uint64_t window_bytes = tmp_bytes(cache, key);
  for (;;) {
    auto lock = FileLock::acquire(path, FileLock::Mode::kExclusive, /*wait=*/false);
    if (lock.ok() || lock.status().error_number() != EWOULDBLOCK) return lock;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const auto now = Clock::now();
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
    const std::string what = "blob " + d.digest + ", which another import on this node is fetching";
    if (now >= wait.deadline)
      return Status::error("gave up waiting " + std::to_string(waited) + " s for " + what +
                               " (" + wait.bound + "); retry later",
                           ETIMEDOUT);
    if (wait.min_rate == 0 || now - window_start < std::chrono::seconds(wait.min_rate_window_s))
      continue;
    const uint64_t bytes = tmp_bytes(cache, key);
    if (bytes < window_bytes + wait.min_rate * static_cast<uint64_t>(wait.min_rate_window_s))
      return Status::error("gave up waiting for " + what + ": it grew " +
                               human_bytes(bytes > window_bytes ? bytes - window_bytes : 0) +
                               " in " + std::to_string(wait.min_rate_window_s) +
                               " s, less than registry_min_rate=" + human_bytes(wait.min_rate) +
                               "/s (SLIPWAY_REGISTRY_MIN_RATE); retry later",
                           ETIMEDOUT);
    window_start = now;
    window_bytes = bytes;
  }
}

}  // namespace

Status ensure_blob(const NodeCache& cache, const Descriptor& d, const BlobFill& fill,
                   const BlobWait& wait) {
  const std::string path = cache.blob_path(d.digest);
  if (exists(path)) return Status();
  const std::string key = "blob-" + digest_hex(d.digest);
  auto lock = wait_for_blob_lock(cache, d, key, wait);
  SLIPWAY_TRY(lock);
  if (exists(path)) return Status();  // fetched by another importer meanwhile
  SLIPWAY_TRY(cache.remove_stale_tmp(key));
  std::string tmp = cache.tmp_dir() + "/" + key + "." + std::to_string(::getpid()) + "." +
                    random_suffix();
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::from_errno("create " + tmp, errno);
  Status st = fill(fd.get());
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) == -1)
    st = Status::from_errno("rename " + tmp + " to " + path, errno);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

// Every layer blob the image will reference is in blobs/ (--container-save and `slipway check`
// read them). The importer's hold_blobs() keeps gc and rm away; this catches anything else.
static Status check_layer_blobs(const NodeCache& cache, const BuildPlan& plan) {
  for (const auto& layer : plan.manifest.layers)
    if (::access(cache.blob_path(layer.digest).c_str(), F_OK) == -1)
      return Status::error("layer blob " + layer.digest + " of image '" + plan.image +
                               "' vanished from " + cache.root() + " during the import; import it again",
                           errno);
  return Status();
}

Result<ImportedImage> build_and_publish(const NodeCache& cache, const BuildPlan& plan,
                                        const LayerFetch& fetch, size_t parallel,
                                        const ImportOptions& opts, Progress& progress) {
  SLIPWAY_TRY(check_declared_sizes(cache, plan, opts.bounds));
  auto tmp = cache.make_tmp_dir(plan.lock_key);
  SLIPWAY_TRY(tmp);
  Status st;
  {
    LayerPool pool(plan.manifest.layers.size(), parallel, fetch);
    st = unpack_all(cache, plan, pool, *tmp + "/rootfs", opts, progress);
  }
  if (st.ok()) st = write_new_file(*tmp + "/config.json", plan.config_body);
  if (st.ok()) st = write_new_file(*tmp + "/manifest.json", plan.manifest_body);
  if (st.ok()) st = write_new_file(*tmp + "/name", plan.image + "\n");
  if (st.ok()) st = check_layer_blobs(cache, plan);
  const std::string dest = cache.image_dir(plan.manifest_digest);
  if (st.ok() && ::rename(tmp->c_str(), dest.c_str()) == -1 && errno != ENOTEMPTY &&
      errno != EEXIST)
    st = with_fix(Status::from_errno("publish " + dest, errno), cache);
  remove_tmp(cache, *tmp);
  SLIPWAY_TRY(st);
  // From memory, not re-read from images/: an rm or gc may remove the image the moment it is
  // published (a step's mark_in_use() then says so, and it imports again).
  return ImportedImage{.manifest_digest = plan.manifest_digest, .rootfs = dest + "/rootfs",
                       .config = plan.config, .was_cached = false};
}

Result<ImportedImage> cached_and_touched(const NodeCache& cache, const std::string& digest) {
  auto img = find_cached_image(cache, digest);
  if (img.ok()) ::utimensat(AT_FDCWD, cache.image_dir(digest).c_str(), nullptr, 0);  // last use
  return img;
}

}  // namespace slipway::launcher
