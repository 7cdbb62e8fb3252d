// Small file helpers shared by the launcher: reading a whole small file with a size limit, by
// default without following a symlink at its last component.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace slipway::launcher {

enum class Symlinks { kRefuse, kFollow };

// The contents of `path`; EFBIG past `max_bytes`. kRefuse opens it O_NOFOLLOW (cache files);
// kFollow is for files an admin or user names (CA bundles are often symlinks).
Result<std::string> read_file_limited(const std::string& path, size_t max_bytes,
                                      Symlinks symlinks = Symlinks::kRefuse);

}  // namespace slipway::launcher
