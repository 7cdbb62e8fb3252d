// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The shared libraries of an image root, found as its own dynamic loader would find them (its
// ld.so.cache) plus a scan of the standard library directories (images built without ldconfig).
// Files are opened with openat2(RESOLVE_IN_ROOT), so an image's absolute symlinks resolve inside
// the image and can never reach the host.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "dl/ld_cache.h"

namespace slipway::launcher {

struct ImageLib {
  std::string name;       // the file name the loader looks for, e.g. "libmpi.so.40"
  std::string path;       // its path inside the image
  std::string real_name;  // the file name after symlinks, e.g. "libmpi.so.40.30.4"
};

class ImageLibs {
 public:
  // `root` is the image's root directory on the host ("/" for the host itself).
  static Result<ImageLibs> scan(const std::string& root);

  const ImageLib* find(std::string_view soname) const;
  // Libraries whose name starts with `prefix` ("libmpi.so." finds every libmpi major).
  std::vector<const ImageLib*> with_prefix(std::string_view prefix) const;
  // Opens `path` (inside the image) for reading, resolving it inside the root.
  Result<UniqueFd> open(const std::string& path) const;
  const std::string& root() const { return root_; }

 private:
  void add(ImageLib lib);
  std::string root_;
  std::vector<ImageLib> libs_;
};

// The numbers after ".so." in a library file name: "libmpi.so.12.1.8" -> {12, 1, 8}.
std::vector<int> so_version(std::string_view file_name);

}  // namespace slipway::launcher
