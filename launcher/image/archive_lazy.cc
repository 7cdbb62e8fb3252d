// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The libarchive functions Slipway calls, forwarded to libarchive.so.13 loaded on first use
// (common/lazy_library.h). Only layer unpack, local archive import and --container-save use
// libarchive; each calls archive_library().load() first for a clear error.
#include "image/archive_lazy.h"

#include <archive.h>
#include <archive_entry.h>

#include <cstdarg>
#include <cstdio>
#include <string>

namespace slipway::launcher {

SLIPWAY_LAZY_LIBRARY(archive_library, "libarchive.so.13", "libarchive13 (Debian) or libarchive (RHEL)")

}  // namespace slipway::launcher

namespace {
using slipway::launcher::archive_library;
using Archive = struct archive*;
using Entry = struct archive_entry*;
using CString = const char*;
}  // namespace

#define SLIPWAY_AR(RET, NAME, PARAMS, ARGS, FAIL) \
  SLIPWAY_LAZY_FORWARD(archive_library(), RET, NAME, PARAMS, ARGS, FAIL)
#define SLIPWAY_AR_VOID(NAME, PARAMS, ARGS) \
  SLIPWAY_LAZY_FORWARD_VOID(archive_library(), NAME, PARAMS, ARGS)

// Reading.
SLIPWAY_AR(Archive, archive_read_new, (void), (), nullptr)
SLIPWAY_AR(int, archive_read_free, (Archive a), (a), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_read_support_filter_gzip, (Archive a), (a), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_read_support_filter_zstd, (Archive a), (a), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_read_support_format_empty, (Archive a), (a), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_read_support_format_tar, (Archive a), (a), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_read_open,
           (Archive a, void* data, archive_open_callback* o, archive_read_callback* r,
            archive_close_callback* c),
           (a, data, o, r, c), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_read_open_fd, (Archive a, int fd, size_t block), (a, fd, block),
           ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_read_next_header, (Archive a, Entry* e), (a, e), ARCHIVE_FATAL)
SLIPWAY_AR(la_ssize_t, archive_read_data, (Archive a, void* buf, size_t n), (a, buf, n),
           ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_read_data_block,
           (Archive a, const void** buf, size_t* n, la_int64_t* off), (a, buf, n, off),
           ARCHIVE_FATAL)

// Writing.
SLIPWAY_AR(Archive, archive_write_new, (void), (), nullptr)
SLIPWAY_AR(int, archive_write_free, (Archive a), (a), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_write_close, (Archive a), (a), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_write_set_format_pax_restricted, (Archive a), (a), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_write_open_fd, (Archive a, int fd), (a, fd), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_write_open2,
           (Archive a, void* data, archive_open_callback* o, archive_write_callback* w,
            archive_close_callback* c, archive_free_callback* f),
           (a, data, o, w, c, f), ARCHIVE_FATAL)
SLIPWAY_AR(int, archive_write_header, (Archive a, Entry e), (a, e), ARCHIVE_FATAL)
SLIPWAY_AR(la_ssize_t, archive_write_data, (Archive a, const void* buf, size_t n), (a, buf, n),
           ARCHIVE_FATAL)

// Errors.
SLIPWAY_AR(int, archive_errno, (Archive a), (a), EIO)
SLIPWAY_AR(CString, archive_error_string, (Archive a), (a), "libarchive is not loaded")

// archive_set_error is variadic: format here, hand libarchive the finished text.
extern "C" void archive_set_error(Archive a, int err, const char* fmt, ...) {
  using Fn = void (*)(Archive, int, const char*, ...);
  static const Fn fn = reinterpret_cast<Fn>(archive_library().symbol("archive_set_error"));
  if (fn == nullptr) return;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  fn(a, err, "%s", text);
}

// Entries.
SLIPWAY_AR(Entry, archive_entry_new, (void), (), nullptr)
SLIPWAY_AR_VOID(archive_entry_free, (Entry e), (e))
SLIPWAY_AR(__LA_MODE_T, archive_entry_filetype, (Entry e), (e), 0)
SLIPWAY_AR(__LA_MODE_T, archive_entry_mode, (Entry e), (e), 0)
SLIPWAY_AR(__LA_MODE_T, archive_entry_perm, (Entry e), (e), 0)
SLIPWAY_AR(time_t, archive_entry_mtime, (Entry e), (e), 0)
SLIPWAY_AR(long, archive_entry_mtime_nsec, (Entry e), (e), 0)
SLIPWAY_AR(la_int64_t, archive_entry_size, (Entry e), (e), 0)
SLIPWAY_AR(CString, archive_entry_pathname, (Entry e), (e), nullptr)
SLIPWAY_AR(CString, archive_entry_pathname_utf8, (Entry e), (e), nullptr)
SLIPWAY_AR(CString, archive_entry_hardlink, (Entry e), (e), nullptr)
SLIPWAY_AR(CString, archive_entry_symlink, (Entry e), (e), nullptr)
SLIPWAY_AR_VOID(archive_entry_set_filetype, (Entry e, unsigned int t), (e, t))
SLIPWAY_AR_VOID(archive_entry_set_perm, (Entry e, __LA_MODE_T m), (e, m))
SLIPWAY_AR_VOID(archive_entry_set_size, (Entry e, la_int64_t n), (e, n))
SLIPWAY_AR_VOID(archive_entry_set_uid, (Entry e, la_int64_t id), (e, id))
SLIPWAY_AR_VOID(archive_entry_set_gid, (Entry e, la_int64_t id), (e, id))
SLIPWAY_AR_VOID(archive_entry_set_mtime, (Entry e, time_t t, long ns), (e, t, ns))
SLIPWAY_AR_VOID(archive_entry_set_pathname, (Entry e, const char* p), (e, p))
SLIPWAY_AR_VOID(archive_entry_set_hardlink, (Entry e, const char* p), (e, p))
SLIPWAY_AR_VOID(archive_entry_set_symlink, (Entry e, const char* p), (e, p))
