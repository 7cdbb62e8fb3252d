// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// import_image(): brings an image into the node cache (download missing blobs, unpack layers,
// publish atomically) or finds it there, and returns its rootfs and runtime config. Safe under
// any number of concurrent importers: one does the work, the others wait on its lock and reuse it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "image/cache.h"
#include "image/image_ref.h"
#include "image/manifest.h"
#include "image/registry.h"

namespace slipway::launcher {

// Bounds a site sets on imports: plugin keys max_image_size=, max_layer_ratio=, min_free_space=;
// for slipway SLIPWAY_MAX_IMAGE_SIZE, SLIPWAY_MAX_LAYER_RATIO, SLIPWAY_MIN_FREE_SPACE.
struct ImportBounds {
  uint64_t max_image_bytes = 64ull << 30;  // all layers of an image, unpacked
  // One layer may unpack to this many times its compressed size, counted from 16 MiB up (a small
  // layer may always unpack to 320 MiB). 20: real layers measure 1.5-3.7:1 (the torch images'
  // 2.7-3.6, CUDA 13.0's libraries 1.5; docs/security.md), while gzip reaches 1030:1 on zeros:
  // a 20 MB bomb stops after 400 MB of writes. 0: no bound.
  double max_layer_ratio = 20;
  // Kept free on the cache's filesystem during an import (downloads and unpack): an import that
  // would leave less fails, so a registry or an image cannot fill a node's disk. 0: none.
  uint64_t min_free_bytes = 1ull << 30;
};

// Sets the bound KEY ("max_image_size", "max_layer_ratio" or "min_free_space") from VALUE (sizes
// as parse_size takes them: 64G, 500M; the ratio a positive number or 0). The error names both.
Status parse_import_bound(ImportBounds& bounds, std::string_view key, std::string_view value);

struct ImportOptions {
  std::string cache_dir;  // the node cache root (created 0700 if missing; must be owned by euid)
  RegistryOptions registry;
  ImportBounds bounds;
  std::function<void(std::string_view line)> progress;  // optional, at most one call per second
  // The bytes of the manifest REF.digest names, fetched once per job by srun and handed to every
  // node (manifest_handoff.h): used instead of a manifest request when their sha256 is
  // REF.digest, ignored otherwise. Empty: fetch the manifest if the image is not cached.
  std::string manifest;
  size_t parallel_downloads = 4;  // layer blobs fetched at once (each on its own connection)
  // A squashfs file given as the image is mounted by the container (runtime/squashfs_mount.h)
  // instead of unpacked into the cache. The caller sets this where it can mount it: FUSE usable,
  // and no --container-save as an OCI archive, which needs the image's layers.
  bool mount_squashfs = false;
  std::string why_not_mount;  // why not, said once (registry.warn) if the image is a squashfs file
};

struct ImportedImage {
  // The image's identity in records (running instances, named containers): its manifest digest,
  // or for a squashfs file to mount, "squashfs:" and its path (squashfs_identity()).
  std::string manifest_digest;
  std::string rootfs;  // the unpacked root in the cache; empty for a squashfs file to mount
  ImageConfig config;
  bool was_cached = false;
  std::string squashfs = {};  // the squashfs file to mount (absolute), or empty
};

// The identity of the squashfs file PATH as an image to mount: "squashfs:" and PATH with every
// byte but [A-Za-z0-9/._+-] as %XX, so records that split on blanks keep it whole.
std::string squashfs_identity(const std::string& path);

// REF.digest may be set already (the plugin resolves it once per job): then a cached image costs
// no request at all, and an uncached one no manifest-by-tag request (none at all with
// OPTS.manifest). Local references (archives, OCI layouts) are read as the calling user; their
// digest is the digest of the image manifest (for a docker-archive: of the OCI manifest made
// from its config and layer diff_ids).
Result<ImportedImage> import_image(const ImageRef& ref, const ImportOptions& opts);

// CAUSE of a failed import of TEXT (the image as the user wrote it), with pyxis's phrase in front,
// which users and scripts look for: "failed to import docker image: TEXT: CAUSE".
// A long TEXT (a path of kilobytes) is named once: where CAUSE repeats it, it says "it".
inline Status import_failed(const std::string& text, const Status& cause) {
  std::string why = cause.message();
  if (text.size() > 200)
    for (const std::string& named : {"image '" + text + "'", "'" + text + "'"})
      for (size_t at; (at = why.find(named)) != std::string::npos;) why.replace(at, named.size(), "it");
  return Status::error("failed to import docker image: " + text + ": " + why, cause.error_number());
}

// The published image MANIFEST_DIGEST in the cache, if it is there (no lock, no network).
Result<ImportedImage> find_cached_image(const NodeCache& cache, std::string_view manifest_digest);

// The image a record names (ImportedImage::manifest_digest): find_cached_image() for a digest,
// the squashfs file read again for squashfs_identity(), which must still be there.
Result<ImportedImage> find_recorded_image(const NodeCache& cache, std::string_view identity);

}  // namespace slipway::launcher
