// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// import_image() for registry images: cache look-up without a lock, then under the image's lock:
// the manifest (handed off by srun, or fetched), the config, the layer blobs (a pool of fetchers,
// each blob under its own lock, verified, renamed into blobs/) and the unpack and publish of
// import_build.cc. Local references go to import_local.cc. See cache.h for the layout.
#include "image/import.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <optional>
#include <thread>
#include <vector>

#include "image/digest.h"
#include "common/file_util.h"
#include "image/import_build.h"
#include "image/tag_memo.h"

namespace slipway::launcher {
namespace {

Result<std::string> read_file(const std::string& path, size_t max) {
  return read_file_limited(path, max);
}

// The handed-off manifest, if it is the one DIGEST names and an image manifest.
std::optional<FetchedManifest> handed_off(const std::string& body, const std::string& digest) {
  if (body.empty() || sha256_digest(body) != digest) return std::nullopt;
  auto kind = manifest_kind(body);
  if (!kind.ok() || *kind != ManifestKind::kManifest) return std::nullopt;
  return FetchedManifest{body, digest, ManifestKind::kManifest, ""};
}

// Everything after the manifest, under the image lock LOCK_KEY: config, blobs, unpack, publish.
Result<ImportedImage> build_image(const NodeCache& cache, RegistryClient& client,
                                  const FetchedManifest& fm, const std::string& lock_key,
                                  const ImportOptions& opts, Progress& progress) {
  BuildPlan plan;
  ImageRef shown = client.ref();  // as the user wrote it: the tag, not the digest srun pinned
  if (!shown.tag.empty()) shown.digest.clear();
  plan.image = shown.str();
  auto m = parse_manifest(fm.body);
  if (!m.ok()) return m.status().context("image '" + plan.image + "'");
  auto config = client.fetch_small_blob(m->config);
  SLIPWAY_TRY(config);
  auto parsed = parse_image_config(*config);
  if (!parsed.ok()) return parsed.status().context("image '" + plan.image + "'");
  plan.manifest_body = fm.body;
  plan.manifest_digest = fm.digest;
  plan.config_body = std::move(*config);
  plan.manifest = std::move(*m);
  plan.config = std::move(*parsed);
  plan.lock_key = lock_key;
  // One client (one curl handle, one connection) per fetcher thread, sharing the token.
  size_t parallel = std::max<size_t>(1, opts.parallel_downloads);
  std::vector<std::unique_ptr<RegistryClient>> clients;
  for (size_t w = 0; w < std::min(parallel, plan.manifest.layers.size()); ++w) {
    clients.push_back(std::make_unique<RegistryClient>(client.ref(), opts.registry));
    clients.back()->share_auth_from(client);
  }
  LayerFetch fetch = [&](size_t i, size_t worker) {
    const Descriptor& d = plan.manifest.layers[i];
    RegistryClient& c = *clients[worker];
    const BlobWait wait{c.deadline(), c.deadline_bound(),
                        static_cast<uint64_t>(opts.registry.min_rate_bytes),
                        opts.registry.min_rate_window_s};
    return with_fix(ensure_blob(cache, d,
                                [&](int fd) { return c.fetch_blob(d, fd, opts.bounds.min_free_bytes); },
                                wait),
                    cache);
  };
  return build_and_publish(cache, plan, fetch, clients.size(), opts, progress);
}

// The import's registry deadline on CLIENT: from START, for the size manifest BODY declares
// (config and layers). A manifest that does not parse keeps the client's own (its errors come later).
void set_import_deadline(RegistryClient& client, const RegistryOptions& opts,
                         std::chrono::steady_clock::time_point start, const std::string& body) {
  auto m = parse_manifest(body);
  if (!m.ok()) return;
  uint64_t declared = m->config.size;
  for (const Descriptor& d : m->layers) declared += d.size;
  const long secs = import_deadline_s(opts, declared);
  if (secs > 0)
    client.set_deadline(start + std::chrono::seconds(secs), import_deadline_text(opts, declared));
}

// The image lock of PATH, for IMAGE (as the user wrote it), waited for until CLIENT's deadline:
// past it, one line naming the image and who holds the lock. Nothing is made meanwhile.
Result<FileLock> wait_for_image_lock(const std::string& path, const std::string& image,
                                     const RegistryClient& client) {
  using Clock = std::chrono::steady_clock;
  if (client.deadline() == Clock::time_point::max())
    return FileLock::acquire(path, FileLock::Mode::kExclusive);
  const auto start = Clock::now();
  for (;;) {
    auto lock = FileLock::acquire(path, FileLock::Mode::kExclusive, /*wait=*/false);
    if (lock.ok() || lock.status().error_number() != EWOULDBLOCK) return lock;
    const auto now = Clock::now();
    if (now >= client.deadline()) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
      return Status::error("gave up after " + std::to_string(waited) + " s waiting for image '" +
                               image + "', which " + lock_holders(path) +
                               " is importing on this node (" + client.deadline_bound() +
                               "); retry when that import ends, or end it",
                           ETIMEDOUT);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(250),
                                                          client.deadline() - now));
  }
}

}  // namespace

Status parse_import_bound(ImportBounds& bounds, std::string_view key, std::string_view value) {
  auto bad = [&](const std::string& why) {
    return Status::error(std::string(key) + "='" + std::string(value) + "' " + why, EINVAL);
  };
  if (key == "max_layer_ratio") {
    std::string text(value);
    char* end = nullptr;
    double r = std::strtod(text.c_str(), &end);
    if (text.empty() || *end || !(r >= 0) || r > 1e9) return bad("is not a ratio (a number like 1000, or 0 for none)");
    bounds.max_layer_ratio = r;
    return Status();
  }
  uint64_t* target = key == "max_image_size" ? &bounds.max_image_bytes
                     : key == "min_free_space" ? &bounds.min_free_bytes
                                               : nullptr;
  if (!target) return Status::error("unknown import bound '" + std::string(key) + "'", EINVAL);
  auto bytes = parse_size(value);
  if (!bytes.ok()) return bad("is not a size (like 64G or 500M)");
  if (key == "max_image_size" && *bytes == 0) return bad("must be more than 0");
  *target = *bytes;
  return Status();
}

Result<ImportedImage> find_cached_image(const NodeCache& cache, std::string_view digest) {
  if (!is_valid_digest(digest))
    return Status::error("'" + std::string(digest) + "' is not a sha256 digest", EINVAL);
  const std::string dir = cache.image_dir(digest);
  auto config = read_file(dir + "/config.json", 8 << 20);
  SLIPWAY_TRY(config);
  auto parsed = parse_image_config(*config);
  SLIPWAY_TRY(parsed);
  return ImportedImage{.manifest_digest = std::string(digest), .rootfs = dir + "/rootfs",
                       .config = std::move(*parsed), .was_cached = true};
}

Result<ImportedImage> import_image(const ImageRef& ref, const ImportOptions& opts) {
  if (ref.kind == ImageRef::Kind::kDaemon) return import_daemon_image(ref, opts);
  if (ref.kind != ImageRef::Kind::kRegistry) return import_local_image(ref, opts);
  const auto start = std::chrono::steady_clock::now();  // the registry deadline counts from here
  NodeCache cache(opts.cache_dir);
  // Pinned and cached: no registry client (CA bundle, curl), and nothing to create.
  if (!ref.digest.empty() && cache.is_trusted())
    if (auto img = cached_and_touched(cache, ref.digest); img.ok()) return img;
  SLIPWAY_TRY(cache.ensure_layout());
  SLIPWAY_TRY(crypto_library().load());  // manifests and blobs are verified from here on
  Progress progress(opts.progress);
  RegistryClient client(ref, opts.registry);
  std::optional<FetchedManifest> fm;
  std::string key = ref.digest;
  if (key.empty()) {
    auto m = platform_manifest_by_tag(client, cache);
    SLIPWAY_TRY(m);
    key = m->digest;
    fm = std::move(*m);
  } else {
    fm = handed_off(opts.manifest, key);
  }
  if (auto img = cached_and_touched(cache, key); img.ok()) return img;
  if (fm) set_import_deadline(client, opts.registry, start, fm->body);
  const std::string lock_key = digest_hex(key);
  // Another import of this image on the node holds its lock: wait for it, up to our deadline.
  ImageRef shown = ref;  // as the user wrote it: the tag, not the digest srun pinned
  if (!shown.tag.empty()) shown.digest.clear();
  auto lock = wait_for_image_lock(cache.lock_path(lock_key), shown.str(), client);
  SLIPWAY_TRY(lock);
  auto blobs = hold_blobs(cache);  // no gc or rm sweeps our blobs before we publish
  SLIPWAY_TRY(blobs);
  if (auto img = cached_and_touched(cache, key); img.ok()) return img;  // imported meanwhile
  SLIPWAY_TRY(cache.remove_stale_tmp(lock_key));
  if (!fm) {
    auto m = client.fetch_platform_manifest();
    SLIPWAY_TRY(m);
    fm = std::move(*m);
    if (fm->digest != key)  // REF.digest named an index: the image is its linux/amd64 entry
      if (auto img = cached_and_touched(cache, fm->digest); img.ok()) return img;
    set_import_deadline(client, opts.registry, start, fm->body);
  }
  // A cold pull-through mirror fetches a blob from the registry once per node that asks before it
  // holds it (docker-registry, Harbor): have it store each once, first (registry.h warm_mirror),
  // which costs a one-byte request per blob once it is warm (srun already warmed it for the
  // plugin's nodes). A mirror that fails here is dropped as for any request.
  if (opts.registry.mirrors.count(ref.registry) != 0) (void)warm_mirror(client, fm->body);
  return build_image(cache, client, *fm, lock_key, opts, progress);
}

}  // namespace slipway::launcher
