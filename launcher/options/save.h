// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// --container-save=PATH, for the plugin and `slipway run` alike: the container's filesystem (the
// cached image plus its changes) as an OCI archive (image/snapshot.h), or, for a PATH ending in .sqsh
// (what pyxis writes and --container-image takes back), as a squashfs file made by mksquashfs from
// the container's root. Either is written beside PATH under a temporary name and renamed into
// place: a failed save leaves nothing at PATH. Called as the job user while the holder still runs.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"
#include "runtime/launch_spec.h"

namespace slipway::launcher {

struct SaveRequest {
  pid_t holder = -1;            // the holder of the container (its namespaces, its tmpfs)
  LaunchSpec spec;              // the container's spec (scratch dir, persistent dir)
  std::string cache_dir;        // the node cache the image is in
  std::string manifest_digest;  // the image the container was made from
  std::string output_path;      // absolute
};

bool is_squashfs_path(const std::string& path);

// The error names the option as the user gave it and the cause.
Status save_container(const SaveRequest& req);

// Writes OUTPUT as a squashfs of DIR (a tree of the user's: an image's rootfs in the cache), every
// file owned by root, mode 0644, published with one rename (`slipway import IMAGE --squashfs`).
Status squash_directory(const std::string& dir, const std::string& output);

// Checks a --container-save target before anything runs (srun, sbatch, salloc, slipway run): a
// file path whose directory exists; a directory ("/tmp/", ".") is refused with the fix.
// OPTION names it in the error (slipway import's --squashfs checks its target the same way).
Status check_save_target(const std::string& path, const std::string& option = "--container-save");

}  // namespace slipway::launcher
