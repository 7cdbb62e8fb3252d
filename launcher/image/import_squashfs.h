// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Squashfs images (enroot's format, which pyxis users have on disk): imported as a one-layer OCI
// image through sqfs2tar and the ordinary layer unpack (see import_squashfs.cc).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "image/import.h"
#include "image/import_build.h"

namespace slipway::launcher {

// The manifest digest a memo file (<cache>/squashfs/KEY) names, or "" (unreadable, not a digest).
std::string squashfs_memo_digest(const std::string& memo_file);

// Whether the file behind FD starts with the squashfs magic ("hsqs").
bool is_squashfs(int fd);

// The NAME=VALUE lines of an enroot /etc/environment: blank lines, comments, "export " prefixes
// and surrounding quotes handled; lines naming host variables (${VAR}) and invalid names left out.
std::vector<std::string> parse_environment_file(std::string_view text);

// "" when the file behind FD, a squashfs, is whole; else why not (truncated: shorter than its
// superblock says), in words for IMAGE.
std::string squashfs_damage(const std::string& image, int fd);

// The squashfs file IMAGE, open as FD, as an image to mount (ImportOptions::mount_squashfs): its
// absolute path, and enroot's runtime config read from it (rdsquashfs, as the calling user).
Result<ImportedImage> squashfs_image_to_mount(const std::string& image, int fd);

// Imports the squashfs file IMAGE, open as FD (read as the calling user), into OPTS.cache_dir,
// whose layout exists. Needs sqfs2tar (squashfs-tools-ng) on the node.
Result<ImportedImage> import_squashfs_image(const std::string& image, int fd,
                                            const ImportOptions& opts, Progress& progress);

}  // namespace slipway::launcher
