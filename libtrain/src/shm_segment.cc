// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// ShmSegment: shm_open, size, mmap, and the undoing of each when a later step fails. The name is
// owned as soon as shm_open has created it, so a failed ftruncate or mmap unlinks it again.
#include "shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "libtrain/errors.h"
#include "socket.h"

namespace libtrain::detail {

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  Fd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600));
  LIBTRAIN_SYS(fd.get(), "shm_open " + name + " (is /dev/shm mounted and shared by the node's ranks?)");
  ShmSegment s;
  s.name_ = name;
  s.owns_name_ = true;  // from here on, a throw unlinks it (~ShmSegment)
  LIBTRAIN_SYS(::ftruncate(fd.get(), static_cast<off_t>(bytes)), "ftruncate " + name);
  s.map(fd.get(), bytes);
  return s;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  Fd fd(::shm_open(name.c_str(), O_RDWR, 0600));
  LIBTRAIN_SYS(fd.get(), "shm_open " + name + " (is /dev/shm mounted and shared by the node's ranks?)");
  struct stat st {};
  LIBTRAIN_SYS(::fstat(fd.get(), &st), "fstat " + name);
  if (static_cast<size_t>(st.st_size) != bytes)
    throw MismatchError("libtrain: shared memory " + name + " is " + std::to_string(st.st_size) +
                        " bytes, this rank expected " + std::to_string(bytes) +
                        "; every rank of the node must set the same LIBTRAIN_SHM_CHUNK");
  ShmSegment s;
  s.name_ = name;
  s.map(fd.get(), bytes);
  return s;
}

void ShmSegment::map(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) LIBTRAIN_SYS(-1, "mmap " + std::to_string(bytes) + " bytes of " + name_);
  addr_ = p;
  bytes_ = bytes;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    reset();
    name_ = std::move(o.name_);
    owns_name_ = std::exchange(o.owns_name_, false);
    addr_ = std::exchange(o.addr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void ShmSegment::unlink() noexcept {
  if (owns_name_) ::shm_unlink(name_.c_str());
  owns_name_ = false;
}

void ShmSegment::reset() noexcept {
  if (addr_) ::munmap(addr_, bytes_);
  addr_ = nullptr;
  bytes_ = 0;
  unlink();
}

}  // namespace libtrain::detail
