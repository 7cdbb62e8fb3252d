// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: the reader of local image archives (launcher/image/import_local.cc) through
// read_local_archive, on the input as the archive file, from a memfd: libarchive's tar reader
// (gzip and zstd too), then index.json, nested indexes, manifests and configs of an OCI archive,
// or manifest.json, the config and the layer names of a docker-archive, with the blobs they name
// looked up and verified by sha256. Nothing is written: the import's later steps (copying the
// layers into a cache, unpacking them) are fuzz_layer's and the cache's.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "image/image_ref.h"
#include "image/import_build.h"

namespace sl = slipway::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("archive", MFD_CLOEXEC);
  if (fd < 0 || write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  auto digest = sl::read_local_archive(fd, "fuzz.tar");
  static const bool show = std::getenv("SLIPWAY_FUZZ_SHOW") != nullptr;  // for writing seeds
  if (show)
    std::fprintf(stderr, "%s\n", digest.ok() ? digest->c_str() : digest.status().message().c_str());
  // An image read whole has a manifest digest that is a digest, whatever the archive held.
  if (digest.ok() && !sl::is_valid_digest(*digest)) __builtin_trap();
  if (!digest.ok() && digest.status().message().empty()) __builtin_trap();
  close(fd);
  return 0;
}
