// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The source-independent half of an import, shared by registry images (import.cc) and local
// archives and layouts (import_local.cc): once the manifest and config are known and verified,
// make the layer blobs present in blobs/ (a bounded pool of fetchers, concurrent with unpacking),
// unpack them in order into a private tmp/ directory and publish it with one rename(2).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "image/cache.h"
#include "image/import.h"
#include "image/manifest.h"

namespace slipway::launcher {

// Calls the user's progress function at most once a second, and only once the import has taken a
// second: a quick import says nothing.
class Progress {
 public:
  explicit Progress(const std::function<void(std::string_view)>& fn);
  void report(const std::string& line);

 private:
  const std::function<void(std::string_view)>& fn_;
  int64_t last_ms_;  // the last call, or the start
};

// Adds what the user should do to an unpack, download or copy error, by its errno.
Status with_fix(const Status& st, const NodeCache& cache);

// Writes blob bytes into FD (an empty private file) and verifies them (size and sha256).
using BlobFill = std::function<Status(int fd)>;
// How long an importer waits for a blob another importer is fetching: the waiter's own registry
// limits applied to the other's download (its file in tmp/). 0: no bound of that kind.
struct BlobWait {
  // The import's deadline (RegistryClient::deadline(); max: none) and how it came about.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::string bound;
  uint64_t min_rate = 0;     // registry_min_rate=: the other's file grows at least this much ...
  long min_rate_window_s = 30;  // ... every this many seconds
};

// Makes blob D present in blobs/: filled once per node even by concurrent importers (each blob
// has its own lock), into tmp/ first, renamed into place when complete. A wait for another
// importer's fetch of D is bounded by WAIT; past it, ETIMEDOUT naming the blob and the bound.
Status ensure_blob(const NodeCache& cache, const Descriptor& d, const BlobFill& fill,
                   const BlobWait& wait = {});

// What a build needs: the verified manifest (its bytes and digest) and config bytes.
struct BuildPlan {
  std::string image;  // the reference as the user wrote it, for messages and `slipway images`
  std::string manifest_body, manifest_digest, config_body;
  Manifest manifest;
  ImageConfig config;
  std::string lock_key;  // the image lock the caller holds (tmp/ entries are named after it)
};

// Makes layer INDEX present in blobs/; WORKER (0..parallel-1) tells which of the caller's
// per-thread resources (a registry client) to use. Called from up to PARALLEL threads at once.
using LayerFetch = std::function<Status(size_t index, size_t worker)>;

// Before a byte is fetched: the blobs PLAN's manifest declares fit max_image_size (compressed
// sizes: an image unpacks to at least about as much), and those not in blobs/ yet fit the
// cache's free space less min_free_space. The errors name the image and the bound.
Status check_declared_sizes(const NodeCache& cache, const BuildPlan& plan,
                            const ImportBounds& bounds);

// Fetches the layers with FETCH (up to PARALLEL at once), unpacks each as soon as it and the ones
// below it are there, publishes images/<hex>/. The caller holds the image lock PLAN.lock_key.
Result<ImportedImage> build_and_publish(const NodeCache& cache, const BuildPlan& plan,
                                        const LayerFetch& fetch, size_t parallel,
                                        const ImportOptions& opts, Progress& progress);

// The published image DIGEST, its last use set to now; an error if it is not published.
Result<ImportedImage> cached_and_touched(const NodeCache& cache, const std::string& digest);

// import_image() for ImageRef::Kind::kArchive and kOciLayout (import_local.cc).
Result<ImportedImage> import_local_image(const ImageRef& ref, const ImportOptions& opts);

// What import_local_image reads from the image archive (OCI archive or docker-archive) open as FD
// before it touches a cache: the manifest's digest, with the manifest and config checked as the
// import checks them. IMAGE names it in errors. (For tests/fuzz/fuzz_local_archive.cc.)
Result<std::string> read_local_archive(int fd, const std::string& image);

// import_image() for ImageRef::Kind::kDaemon (import_daemon.cc).
Result<ImportedImage> import_daemon_image(const ImageRef& ref, const ImportOptions& opts);

}  // namespace slipway::launcher
