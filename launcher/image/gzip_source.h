// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// GzipSource: feeds libarchive the inflated bytes of a gzip layer, inflated with ISA-L (igzip,
// about 3-4x zlib's speed here) in a helper thread so inflating overlaps with writing files.
// Multi-member gzip streams are handled; the gzip CRC and length trailers are verified.
#pragma once

#include <memory>
#include <string>

#include "common/lazy_library.h"
#include "common/status.h"

namespace slipway::launcher {

// ISA-L, loaded on first use (common/lazy_library.h); without it layers inflate through libarchive.
LazyLibrary& isal_library();

class GzipSource {
 public:
  // FD must stay open while the source lives. Fails (no thread started) if FD cannot be mapped.
  static Result<std::unique_ptr<GzipSource>> open(int fd);
  ~GzipSource();
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  // The next chunk of inflated data (valid until the next call): its size, 0 at the end, or -1
  // with *error set.
  long next(const void** data, std::string* error);

 private:
  GzipSource() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True when FD's first bytes are the gzip magic (1f 8b). Reads with pread: the offset is kept.
bool is_gzip_file(int fd);

}  // namespace slipway::launcher
