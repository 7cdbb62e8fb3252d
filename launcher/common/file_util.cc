// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Small file helpers (see file_util.h).
#include "common/file_util.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "common/unique_fd.h"

namespace slipway::launcher {

Result<std::string> read_file_limited(const std::string& path, size_t max_bytes,
                                      Symlinks symlinks) {
  const int nofollow = symlinks == Symlinks::kRefuse ? O_NOFOLLOW : 0;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | nofollow));
  if (!fd.valid()) return Status::from_errno("open " + path, errno);
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno("read " + path, errno);
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) return Status::error(path + " is too large", EFBIG);
  }
  return out;
}

Status write_file_atomic(const std::string& path, const std::string& content) {
  // pid and a random part: two hosts writing one shared cache never share a temp file.
  unsigned long long r = 0;
  (void)!::getrandom(&r, sizeof r, 0);
  char suffix[40];
  std::snprintf(suffix, sizeof suffix, ".tmp.%d.%016llx", static_cast<int>(::getpid()), r);
  const std::string tmp = path + suffix;
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::from_errno("create " + tmp, errno);
  Status st;
  for (size_t done = 0; st.ok() && done < content.size();) {
    ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) st = Status::from_errno("write " + tmp, errno);
    else done += static_cast<size_t>(n);
  }
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) == -1)
    st = Status::from_errno("rename " + tmp + " to " + path, errno);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Status make_dirs(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return Status();
  if (errno != ENOENT) return Status::from_errno("mkdir " + path, errno);
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) SLIPWAY_TRY(make_dirs(path.substr(0, slash), mode));
  if (::mkdir(path.c_str(), mode) == -1 && errno != EEXIST)
    return Status::from_errno("mkdir " + path, errno);
  return Status();
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace slipway::launcher
