// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Libraries of an image root (see image_libs.h).
#include "dl/image_libs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

namespace slipway::launcher {
namespace {

// Where Debian, Red Hat and most hand-built images keep libraries, in the loader's default order.
constexpr const char* kLibDirs[] = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                    "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                    "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"};

Result<UniqueFd> open_beneath(int root_fd, const std::string& path, int flags) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  std::string rel = path;
  while (!rel.empty() && rel[0] == '/') rel.erase(0, 1);
  if (rel.empty()) rel = ".";
  int fd = static_cast<int>(syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
  if (fd < 0) return Status::from_errno("open " + path + " in the image", errno);
  return UniqueFd(fd);
}

std::string base_name(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The file name an fd refers to, after every symlink.
std::string real_name_of(int fd) {
  char buf[4096];
  ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf - 1);
  return n > 0 ? base_name(std::string(buf, static_cast<size_t>(n))) : "";
}

}  // namespace

std::vector<int> so_version(std::string_view file_name) {
  std::vector<int> out;
  size_t at = file_name.find(".so.");
  if (at == std::string_view::npos) return out;
  std::string_view rest = file_name.substr(at + 4);
  while (!rest.empty()) {
    int v = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (ec != std::errc()) break;
    out.push_back(v);
    rest.remove_prefix(static_cast<size_t>(end - rest.data()));
    if (rest.empty() || rest[0] != '.') break;
    rest.remove_prefix(1);
  }
  return out;
}

Result<ImageLibs> ImageLibs::scan(const std::string& root) {
  ImageLibs libs;
  libs.root_ = root;
  // The image's own loader cache first: it is what ld.so inside the image consults.
  if (auto fd = libs.open("/etc/ld.so.cache"); fd.ok()) {
    auto cache = LdCache::load("/proc/self/fd/" + std::to_string(fd->get()));
    if (cache.ok())
      for (const auto& e : cache->entries()) libs.add({e.name, e.path, ""});
  }
  for (const char* dir : kLibDirs) {
    auto fd = libs.open(dir);
    if (!fd.ok()) continue;
    DIR* d = fdopendir(dup(fd->get()));
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if ((name.rfind("lib", 0) == 0 || name.rfind("ld-", 0) == 0) &&
          name.find(".so") != std::string::npos)
        libs.add({name, std::string(dir) + "/" + name, ""});
    }
    closedir(d);
  }
  for (auto& lib : libs.libs_)
    if (auto fd = libs.open(lib.path); fd.ok()) lib.real_name = real_name_of(fd->get());
  return libs;
}

void ImageLibs::add(ImageLib lib) {
  for (const auto& l : libs_)
    if (l.name == lib.name) return;  // the first one wins, as for the loader
  libs_.push_back(std::move(lib));
}

const ImageLib* ImageLibs::find(std::string_view soname) const {
  for (const auto& l : libs_)
    if (l.name == soname) return &l;
  return nullptr;
}

std::vector<const ImageLib*> ImageLibs::with_prefix(std::string_view prefix) const {
  std::vector<const ImageLib*> out;
  for (const auto& l : libs_)
    if (std::string_view(l.name).substr(0, prefix.size()) == prefix) out.push_back(&l);
  return out;
}

Result<UniqueFd> ImageLibs::open(const std::string& path) const {
  UniqueFd root_fd(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd.valid()) return Status::from_errno("open image root " + root_, errno);
  return open_beneath(root_fd.get(), path, O_RDONLY);
}

}  // namespace slipway::launcher
