// Small file helpers (see file_util.h).
#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

Status make_dirs(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return Status();
  if (errno != ENOENT) return Status::from_errno("mkdir " + path, errno);
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) SLIPWAY_TRY(make_dirs(path.substr(0, slash), mode));
  if (::mkdir(path.c_str(), mode) == -1 && errno != EEXIST)
    return Status::from_errno("mkdir " + path, errno);
  return Status();
}

}  // namespace slipway::launcher
