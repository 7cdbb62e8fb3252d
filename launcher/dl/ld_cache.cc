// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// ld.so.cache reader (see ld_cache.h). Layout of glibc's new format (elf/cache.c, sysdeps
// dl-cache.h): a 48-byte header "glibc-ld.so.cache1.1", nlibs, len_strings, flags, ...; then nlibs
// 24-byte entries {int32 flags; uint32 key; uint32 value; uint32 osversion; uint64 hwcap}, key and
// value being offsets of the soname and the path from the start of that header.
#include "dl/ld_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "common/unique_fd.h"

namespace slipway::launcher {
namespace {

constexpr std::string_view kNewMagic = "glibc-ld.so.cache1.1";
constexpr std::string_view kOldMagic = "ld.so-1.7.0";
constexpr size_t kHeaderSize = 48, kEntrySize = 24;
constexpr uint32_t kTypeMask = 0x00ff, kTypeElfLibc6 = 0x0003, kArchMask = 0xff00;
#if defined(__x86_64__)
constexpr uint32_t kNativeArch = 0x0300;  // FLAG_X8664_LIB64
#elif defined(__aarch64__)
constexpr uint32_t kNativeArch = 0x0a00;  // FLAG_AARCH64_LIB64
#else
constexpr uint32_t kNativeArch = 0;
#endif

uint32_t u32(std::string_view b, size_t off) {
  uint32_t v;
  memcpy(&v, b.data() + off, sizeof v);
  return v;
}

// The string at `off` in `b`, or nullopt when it is out of bounds or unterminated.
std::optional<std::string> cstr(std::string_view b, size_t off) {
  if (off >= b.size()) return std::nullopt;
  size_t end = b.find('\0', off);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(b.substr(off, end - off));
}

}  // namespace

Result<LdCache> LdCache::parse(std::string_view bytes, const std::string& what) {
  // An old-format header may precede the new one (ldconfig -c compat): skip to the new magic.
  size_t base = bytes.find(kNewMagic);
  if (base == std::string_view::npos || (base != 0 && bytes.substr(0, kOldMagic.size()) != kOldMagic))
    return Status::error(what + " is not a glibc ld.so.cache (new format); run ldconfig", EINVAL);
  std::string_view b = bytes.substr(base);
  if (b.size() < kHeaderSize) return Status::error(what + " is truncated", EINVAL);
  const uint32_t nlibs = u32(b, 20);
  if (nlibs > (b.size() - kHeaderSize) / kEntrySize)
    return Status::error(what + " is truncated (" + std::to_string(nlibs) + " entries)", EINVAL);
  std::vector<LdCacheEntry> entries;
  for (uint32_t i = 0; i < nlibs; ++i) {
    const size_t e = kHeaderSize + i * kEntrySize;
    const uint32_t flags = u32(b, e);
    if ((flags & kTypeMask) != kTypeElfLibc6 || (flags & kArchMask) != kNativeArch) continue;
    auto name = cstr(b, u32(b, e + 4));
    auto path = cstr(b, u32(b, e + 8));
    if (!name || !path) return Status::error(what + ": entry " + std::to_string(i) + " is malformed", EINVAL);
    entries.push_back({std::move(*name), std::move(*path)});
  }
  return LdCache(std::move(entries));
}

Result<LdCache> LdCache::load(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return LdCache();
    return Status::from_errno("open " + path, errno);
  }
  std::string bytes;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd.get(), buf, sizeof buf)) > 0) {
    bytes.append(buf, static_cast<size_t>(n));
    if (bytes.size() > (64u << 20)) return Status::error(path + " is larger than 64 MiB", EFBIG);
  }
  if (n < 0) return Status::from_errno("read " + path, errno);
  return parse(bytes, path);
}

const LdCacheEntry* LdCache::find(std::string_view soname) const {
  for (const auto& e : entries_)
    if (e.name == soname) return &e;
  return nullptr;
}

std::vector<const LdCacheEntry*> LdCache::with_prefix(std::string_view prefix) const {
  std::vector<const LdCacheEntry*> out;
  for (const auto& e : entries_)
    if (std::string_view(e.name).substr(0, prefix.size()) == prefix) out.push_back(&e);
  return out;
}

}  // namespace slipway::launcher
