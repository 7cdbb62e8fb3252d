// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Layer unpack: applies one OCI layer (a tar, uncompressed or gzip/zstd compressed) onto a rootfs
// directory with the OCI changeset rules (whiteouts, opaque directories) and with every entry
// treated as hostile: nothing is ever written outside the root or through a symlink.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace slipway::launcher {

// How an error names the site bound KEY, now VALUE: "max_image_size=1.0 GiB,
// SLIPWAY_MAX_IMAGE_SIZE" (the plugin's key, then slipway's variable).
std::string bound_text(std::string_view key, std::string_view value);

// The most a layer of COMPRESSED bytes may unpack to under max_layer_ratio=MAX_RATIO (file data
// plus 512 bytes per entry, as UnpackBudget counts): MAX_RATIO times COMPRESSED, counted from
// 16 MiB up; UINT64_MAX for MAX_RATIO 0 (no bound).
uint64_t layer_unpack_allowance(uint64_t compressed, double max_ratio);

// Shared by the layers of one image: the bounds a site sets (ImportOptions), and what they count.
struct UnpackBudget {
  uint64_t max_bytes = 64ull << 30;  // all layers together (max_image_size=)
  double max_ratio = 0;              // one layer: at most this many times its compressed size,
                                     // counted from 16 MiB up (max_layer_ratio=); 0: no bound
  uint64_t min_free_bytes = 0;       // keep this much free on the target's filesystem, checked
                                     // before each layer and every 64 MiB (min_free_space=)
  uint64_t used = 0;  // file data plus 512 bytes per entry (metadata bombs count too)
  // The layer being applied (set by apply_layer).
  uint64_t layer_compressed = 0, layer_used = 0, free_checked_at = 0;
};

struct UnpackStats {
  uint64_t entries = 0, bytes = 0, skipped_devices = 0, dropped_setid = 0;
};

// Applies the layer read from LAYER_FD onto the tree at ROOTFD. The rules (OCI image-spec
// layer.md) and the choices made here:
//   - absolute entry paths are taken relative to the root; '..' components are rejected;
//   - no entry may be written through a symlink or a non-directory (lower layers' included);
//   - a file, symlink or hard link replaces what was there (unlinked first, so other hard links
//     to the old file keep the old content); a directory over a non-directory replaces it;
//   - hard link targets must already exist inside the tree;
//   - `.wh.NAME` removes NAME from lower layers, `.wh..wh..opq` empties its directory of
//     lower-layer content; entries of the same layer are kept, as the spec requires;
//   - setuid/setgid bits are dropped, owner bits forced to u+rw (files) and u+rwx (directories)
//     so the unprivileged owner can read, update and remove the tree; ownership is not kept;
//   - character/block devices and sockets are skipped, FIFOs created; xattrs are not kept;
//   - the data of an entry may not exceed its header's size, the total may not exceed
//     BUDGET.max_bytes, a layer may not inflate past BUDGET.max_ratio, and the filesystem must keep
//     BUDGET.min_free_bytes free.
// On failure the tree is left partly written: callers unpack into a private directory.
Status apply_layer(int rootfd, int layer_fd, UnpackBudget& budget, UnpackStats* stats = nullptr);

}  // namespace slipway::launcher
