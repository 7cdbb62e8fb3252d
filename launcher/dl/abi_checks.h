// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The checks run before host libraries are injected (host_libs.h): same soname major as the
// image's copy; Sarus's MPICH-ABI rules; every symbol version the host libraries need from the
// image's libraries (GLIBC_2.34 from libc.so.6, GLIBCXX_3.4.30 from libstdc++.so.6) defined there;
// and a NCCL net plugin's API version accepted by the NCCL that will load it.
#pragma once

#include <string>
#include <vector>

#include "dl/elf.h"
#include "dl/host_libs.h"
#include "dl/image_libs.h"

namespace slipway::launcher {

// One library of the injection closure.
struct ResolvedLib {
  std::string set, soname;
  std::string host_file;  // the file on the host (under the host root)
  std::string why;
  ElfInfo elf;            // with exported symbols for the libraries named in a set
  bool named = false;     // named in the set (not only a dependency)
};

void check_injection(const std::vector<ResolvedLib>& libs, const InjectRequest& req,
                     const ImageLibs& image, InjectionPlan& plan);

}  // namespace slipway::launcher
