// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The dynamic loader's cache (/etc/ld.so.cache, written by ldconfig(8)): which file the loader
// would map for a soname. Used on the host (to find the driver's and the injected libraries'
// dependencies exactly as ld.so would) and on an image root (to find the image's own copies).
// Only glibc's "new" format (glibc-ld.so.cache1.1, the only one since glibc 2.32) is read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace slipway::launcher {

struct LdCacheEntry {
  std::string name;  // the soname, e.g. "libcuda.so.1"
  std::string path;  // the file the loader maps, e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
};

class LdCache {
 public:
  LdCache() = default;
  explicit LdCache(std::vector<LdCacheEntry> entries) : entries_(std::move(entries)) {}

  // Parses the bytes of an ld.so.cache, keeping only entries of this machine's ABI (the flags
  // glibc's ldconfig writes for x86-64 or aarch64 libc6 libraries).
  static Result<LdCache> parse(std::string_view bytes, const std::string& what);
  // Reads `path`; a missing file gives an empty cache (an image without ldconfig's cache).
  static Result<LdCache> load(const std::string& path);

  // The first entry for `soname` (the one ld.so uses), or nullptr.
  const LdCacheEntry* find(std::string_view soname) const;
  // Entries whose name starts with `prefix`, e.g. "libmpi.so." for every libmpi major.
  std::vector<const LdCacheEntry*> with_prefix(std::string_view prefix) const;
  const std::vector<LdCacheEntry>& entries() const { return entries_; }

 private:
  std::vector<LdCacheEntry> entries_;
};

}  // namespace slipway::launcher
