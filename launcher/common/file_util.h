// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Small file helpers shared by the launcher: reading a whole small file with a size limit, by
// default without following a symlink at its last component; replacing a small file atomically;
// mkdir -p.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "common/status.h"

namespace slipway::launcher {

enum class Symlinks { kRefuse, kFollow };

// The contents of `path`; EFBIG past `max_bytes`. kRefuse opens it O_NOFOLLOW (cache files);
// kFollow is for files an admin or user names (CA bundles are often symlinks).
Result<std::string> read_file_limited(const std::string& path, size_t max_bytes,
                                      Symlinks symlinks = Symlinks::kRefuse);

// Replaces `path` with `content` (mode 0600) so that a reader sees the old file or the new one,
// never a part: written beside it under a name unique to this process, then renamed over it.
// A failure leaves `path` as it was and no temporary file behind.
Status write_file_atomic(const std::string& path, const std::string& content);

// mkdir -p: creates `path` and its missing parents with `mode`. An existing path costs one mkdir(2)
// (every launch runs this on its cache directories).
Status make_dirs(const std::string& path, mode_t mode);

// Whether PATH names a directory, following symlinks (stat(2)); false for "" and on any error.
bool is_dir(const std::string& path);

}  // namespace slipway::launcher
