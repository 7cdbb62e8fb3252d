// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// GzipSource (see gzip_source.h): a producer thread inflates the mmapped blob into a ring of
// chunks; libarchive's read callback consumes them. Shutdown is cooperative: the destructor sets
// stop_ and joins, so an early unpack error never leaves a thread behind.
#include "image/gzip_source.h"

#include <isa-l/igzip_lib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace slipway::launcher {

SLIPWAY_LAZY_LIBRARY(isal_library, "libisal.so.2", "libisal2 (Debian) or isa-l (RHEL)")

}  // namespace slipway::launcher

#define SLIPWAY_ISAL(NAME, TYPE) \
  SLIPWAY_LAZY_FORWARD(slipway::launcher::isal_library(), int, NAME, (TYPE * s), (s), ISAL_INVALID_STATE)
#define SLIPWAY_ISAL_VOID(NAME, TYPE) \
  SLIPWAY_LAZY_FORWARD_VOID(slipway::launcher::isal_library(), NAME, (TYPE * s), (s))
SLIPWAY_ISAL(isal_inflate, struct inflate_state)
SLIPWAY_ISAL_VOID(isal_inflate_init, struct inflate_state)
SLIPWAY_ISAL_VOID(isal_inflate_reset, struct inflate_state)
SLIPWAY_ISAL(isal_deflate, struct isal_zstream)
SLIPWAY_ISAL_VOID(isal_deflate_init, struct isal_zstream)

namespace slipway::launcher {
namespace {
constexpr size_t kChunk = 1 << 20;
constexpr size_t kChunks = 4;
constexpr size_t kMaxAvailIn = 1u << 30;  // avail_in is 32 bits
}  // namespace

struct GzipSource::Impl {
  const uint8_t* base = nullptr;
  size_t size = 0;
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<size_t> used;  // bytes filled per buffer
  std::deque<size_t> full, free_bufs;
  long held = -1;  // buffer handed to the consumer
  bool done = false, stop = false;
  std::string error;
  std::mutex mu;
  std::condition_variable cv;
  std::thread worker;

  void run();
  bool inflate_into(inflate_state& st, size_t idx, bool& finished);
  void finish(std::string err) {
    std::lock_guard<std::mutex> l(mu);
    error = std::move(err);
    done = true;
    cv.notify_all();
  }
};

// Fills buffer IDX; returns false on a gzip error (already reported).
bool GzipSource::Impl::inflate_into(inflate_state& st, size_t idx, bool& finished) {
  st.next_out = bufs[idx].data();
  st.avail_out = static_cast<uint32_t>(kChunk);
  while (st.avail_out > 0 && !finished) {
    size_t consumed = static_cast<size_t>(st.next_in - base);
    if (st.avail_in == 0 && consumed < size)
      st.avail_in = static_cast<uint32_t>(std::min(size - consumed, kMaxAvailIn));
    uint32_t out_before = st.avail_out;
    int ret = isal_inflate(&st);
    if (ret < 0) {
      finish("gzip data is corrupt (isa-l error " + std::to_string(ret) + ")");
      return false;
    }
    if (st.block_state == ISAL_BLOCK_FINISH) {
      consumed = static_cast<size_t>(st.next_in - base);
      if (size - consumed >= 2 && base[consumed] == 0x1f && base[consumed + 1] == 0x8b) {
        isal_inflate_reset(&st);  // another gzip member follows
        st.crc_flag = ISAL_GZIP;
        st.next_in = const_cast<uint8_t*>(base + consumed);
        st.avail_in = static_cast<uint32_t>(std::min(size - consumed, kMaxAvailIn));
        continue;
      }
      finished = true;
    } else if (st.avail_in == 0 && static_cast<size_t>(st.next_in - base) >= size &&
               st.avail_out == out_before) {
      finish("gzip data is truncated");
      return false;
    }
  }
  used[idx] = kChunk - st.avail_out;
  return true;
}

void GzipSource::Impl::run() {
  inflate_state st;
  isal_inflate_init(&st);
  st.crc_flag = ISAL_GZIP;
  st.next_in = const_cast<uint8_t*>(base);
  st.avail_in = static_cast<uint32_t>(std::min(size, kMaxAvailIn));
  bool finished = false;
  while (!finished) {
    size_t idx;
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return stop || !free_bufs.empty(); });
      if (stop) return;
      idx = free_bufs.front();
      free_bufs.pop_front();
    }
    if (!inflate_into(st, idx, finished)) return;
    std::lock_guard<std::mutex> l(mu);
    full.push_back(idx);
    cv.notify_all();
  }
  finish("");
}

Result<std::unique_ptr<GzipSource>> GzipSource::open(int fd) {
  SLIPWAY_TRY(isal_library().load());
  struct stat sb;
  if (::fstat(fd, &sb) == -1) return Status::from_errno("stat layer", errno);
  if (sb.st_size < 18) return Status::error("gzip layer is truncated", EBADMSG);
  void* p = ::mmap(nullptr, static_cast<size_t>(sb.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return Status::from_errno("map layer", errno);
  ::madvise(p, static_cast<size_t>(sb.st_size), MADV_SEQUENTIAL);
  std::unique_ptr<GzipSource> src(new GzipSource());
  src->impl_ = std::make_unique<Impl>();
  Impl& im = *src->impl_;
  im.base = static_cast<const uint8_t*>(p);
  im.size = static_cast<size_t>(sb.st_size);
  im.bufs.assign(kChunks, std::vector<uint8_t>(kChunk));
  im.used.assign(kChunks, 0);
  for (size_t i = 0; i < kChunks; ++i) im.free_bufs.push_back(i);
  im.worker = std::thread([&im] { im.run(); });
  return src;
}

GzipSource::~GzipSource() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stop = true;
    impl_->cv.notify_all();
  }
  if (impl_->worker.joinable()) impl_->worker.join();
  ::munmap(const_cast<uint8_t*>(impl_->base), impl_->size);
}

long GzipSource::next(const void** data, std::string* error) {
  Impl& im = *impl_;
  std::unique_lock<std::mutex> l(im.mu);
  if (im.held >= 0) {
    im.free_bufs.push_back(static_cast<size_t>(im.held));
    im.held = -1;
    im.cv.notify_all();
  }
  im.cv.wait(l, [&] { return !im.full.empty() || im.done; });
  if (!im.full.empty()) {
    size_t idx = im.full.front();
    im.full.pop_front();
    im.held = static_cast<long>(idx);
    *data = im.bufs[idx].data();
    return static_cast<long>(im.used[idx]);
  }
  if (!im.error.empty()) {
    *error = im.error;
    return -1;
  }
  return 0;
}

bool is_gzip_file(int fd) {
  unsigned char magic[2] = {};
  return ::pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace slipway::launcher
