// Small file helpers shared by the launcher: reading a whole small file without following a
// symlink at its last component, with a size limit.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace slipway::launcher {

// The contents of `path` (opened O_NOFOLLOW); EFBIG past `max_bytes`.
Result<std::string> read_file_limited(const std::string& path, size_t max_bytes);

}  // namespace slipway::launcher
