// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// LazyLibrary (see lazy_library.h): dlopen once, then dlsym.
#include "common/lazy_library.h"

#include <dlfcn.h>

namespace slipway::launcher {

Status LazyLibrary::load() {
  std::call_once(once_, [this] {
    // RTLD_LOCAL: its symbols serve only our lookups, never the host program (the plugin runs
    // inside srun and slurmstepd).
    handle_ = dlopen(soname_, RTLD_LAZY | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      status_ = Status::error(std::string("cannot load ") + soname_ + ": " +
                                  (why ? why : "unknown error") + "; install " + package_,
                              ELIBACC);
    }
  });
  return status_;
}

void* LazyLibrary::symbol(const char* name) {
  if (!load().ok()) return nullptr;
  return dlsym(handle_, name);
}

}  // namespace slipway::launcher
