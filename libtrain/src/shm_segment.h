// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// ShmSegment: one POSIX shared-memory object (shm_overview(7)) mapped into this process, owned
// like a file descriptor. The rank that creates the name owns it and unlinks it when the segment
// goes, so a ShmGroup constructor that throws after shm_open leaves nothing in /dev/shm; a rank
// that opens a name another rank created never unlinks it.
#pragma once

#include <cstddef>
#include <string>

namespace libtrain::detail {

class ShmSegment {
 public:
  // A new name of `bytes` zero-filled bytes. O_EXCL: an existing name is an error, never reused
  // (nor unlinked: it is not ours).
  static ShmSegment create(const std::string& name, size_t bytes);
  // The segment another rank created; throws MismatchError when it is not `bytes` long (touching
  // a mapping past the object's end would raise SIGBUS instead of an error).
  static ShmSegment open(const std::string& name, size_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment() { reset(); }

  void* data() const { return addr_; }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }
  // Removes the name now if this rank created it (the mapping stays); later calls do nothing.
  void unlink() noexcept;

 private:
  void reset() noexcept;
  void map(int fd, size_t bytes);

  std::string name_;
  bool owns_name_ = false;
  void* addr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace libtrain::detail
