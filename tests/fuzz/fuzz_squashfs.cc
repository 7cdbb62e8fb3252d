// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: the parts of the squashfs reader (launcher/image/import_squashfs.h) that read
// the image file's bytes themselves rather than through rdsquashfs or squashfuse:
// parse_environment_file on the input as an enroot /etc/environment, and is_squashfs and
// squashfs_damage (the superblock check) on the input as the file, from a memfd. Beyond the
// sanitizers it checks what the parser promises: every line it keeps is NAME=VALUE with a valid
// name and no ${...} left in it.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "fuzz_input.h"
#include "image/import_squashfs.h"

namespace sl = slipway::launcher;

namespace {

bool is_valid_line(const std::string& line) {
  size_t eq = line.find('=');
  if (eq == std::string::npos || eq == 0 || (line[0] >= '0' && line[0] <= '9')) return false;
  for (size_t i = 0; i < eq; ++i) {
    char c = line[i];
    if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
      return false;
  }
  return line.find("${", eq) == std::string::npos && line.find('\n') == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const std::string& line : sl::parse_environment_file(slipway::fuzz::as_text(data, size)))
    if (!is_valid_line(line)) __builtin_trap();

  int fd = memfd_create("squashfs", MFD_CLOEXEC);
  if (fd < 0 || write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  bool magic = sl::is_squashfs(fd);
  std::string why = sl::squashfs_damage("fuzz.sqsh", fd);
  // Fewer than 96 bytes is always "truncated"; a damaged file's reason names it.
  if (size < 96 && why.empty()) __builtin_trap();
  if (!why.empty() && why.find("'fuzz.sqsh'") == std::string::npos) __builtin_trap();
  (void)magic;
  close(fd);
  return 0;
}
