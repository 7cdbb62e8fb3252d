// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// save_snapshot(): `--container-save=PATH`. Writes a container's filesystem (the cached image plus
// the overlay's upper directory) as an OCI archive that `skopeo copy oci-archive:PATH ...`, umoci
// and Slipway's own importer accept: the image's layer blobs unchanged, one new gzip layer made
// from the upper directory (overlay whiteouts turned into OCI ones), a new config and manifest.
#pragma once

#include <string>

#include "common/status.h"

namespace slipway::launcher {

struct SnapshotRequest {
  // The node cache root.
  std::string cache_dir;
  // "sha256:..." of the image the container was made from (in the cache).
  std::string manifest_digest;
  // The overlay's upper directory (the changes).
  std::string upper_dir;
  // The OCI archive to write; written to a temp file beside it, then renamed.
  std::string output_path;
};

// The archive holds `oci-layout`, `index.json` (one manifest, ref.name "latest") and
// `blobs/sha256/`. The new layer keeps regular files, directories, symlinks, FIFOs and hard links
// (inside the upper directory) with their modes (setuid/setgid dropped) and mtimes, owned by 0:0;
// overlay whiteouts (0/0 character devices, or files with the `overlay.whiteout` xattr) become
// `.wh.NAME`, opaque directories (`overlay.opaque`="y") get `.wh..wh..opq`; other devices,
// sockets and xattrs are not kept. No symlink in the upper directory is ever followed. An upper
// directory with nothing in it adds no layer. The container should be stopped (or idle): files
// that change while they are read are saved as they were seen. Needs room for the new layer twice
// (a scratch copy, then the archive) beside OUTPUT_PATH; on failure nothing is left there.
Status save_snapshot(const SnapshotRequest& req);

}  // namespace slipway::launcher
