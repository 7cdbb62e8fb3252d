// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: apply_layer (launcher/image/layer.h) on arbitrary bytes as a layer blob (tar,
// gzip or zstd, libarchive detects which), read from a memfd and unpacked into a fresh directory
// per input. Beyond the sanitizers it checks what docs/security.md promises of hostile layers:
// nothing appears beside the root or changes the canary there, and the tree is always removable.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_input.h"
#include "image/fs_beneath.h"
#include "image/layer.h"

namespace sl = slipway::launcher;

namespace {

constexpr char kCanary[] = "canary";

// BASE (made once per process, removed at exit) holds root/ while one input is applied, and
// outside/canary, which no layer may reach.
struct Base {
  std::string path;
  int fd = -1;
  Base() {
    const char* shm = "/dev/shm";
    path = std::string(access(shm, W_OK) == 0 ? shm : "/tmp") + "/slipway-fuzz-layer.XXXXXX";
    if (!mkdtemp(path.data())) std::abort();
    fd = open(path.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (fd < 0 || mkdirat(fd, "outside", 0755) != 0) std::abort();
    int c = openat(fd, "outside/canary", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (c < 0 || write(c, kCanary, sizeof(kCanary)) != sizeof(kCanary)) std::abort();
    close(c);
  }
  ~Base() {
    (void)sl::remove_tree_at(fd, "outside");
    (void)sl::remove_tree_at(fd, "root");
    close(fd);
    rmdir(path.c_str());
  }
  // BASE holds exactly outside/ (and root/ when ROOT_THERE), outside/ only the intact canary.
  bool intact(bool root_there) const {
    int names = 0;
    bool ok = true;
    int dup_fd = openat(fd, ".", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    DIR* d = fdopendir(dup_fd);
    if (!d) return false;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      ++names;
      ok = ok && (n == "outside" || (root_there && n == "root"));
    }
    closedir(d);
    char buf[64] = {};
    int c = openat(fd, "outside/canary", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    ssize_t n = c < 0 ? -1 : read(c, buf, sizeof(buf));
    if (c >= 0) close(c);
    struct stat st{};
    bool canary_ok = n == sizeof(kCanary) && std::memcmp(buf, kCanary, sizeof(kCanary)) == 0 &&
                     fstatat(fd, "outside", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    return ok && names == (root_there ? 2 : 1) && canary_ok;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Base base;
  int layer = memfd_create("layer", MFD_CLOEXEC);
  if (layer < 0 || write(layer, data, size) != static_cast<ssize_t>(size)) std::abort();
  lseek(layer, 0, SEEK_SET);
  if (mkdirat(base.fd, "root", 0755) != 0) std::abort();
  int rootfd = openat(base.fd, "root", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
  if (rootfd < 0) std::abort();
  sl::UnpackBudget budget;
  budget.max_bytes = 64 << 20;  // keep a decompression bomb from filling the fuzzing machine
  budget.max_ratio = 1000;
  sl::UnpackStats stats;
  (void)sl::apply_layer(rootfd, layer, budget, &stats);
  close(rootfd);
  close(layer);
  if (!base.intact(true)) __builtin_trap();  // something escaped the root
  if (!sl::remove_tree_at(base.fd, "root").ok()) __builtin_trap();  // a tree we cannot remove
  return 0;
}
