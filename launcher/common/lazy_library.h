// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// LazyLibrary: a shared library loaded with dlopen(3) the first time Slipway needs it, not at start.
// libarchive (with libxml2 and ICU behind it) and libcrypto cost ~2 ms of dynamic linking to every
// `slipway` start and every srun that loads the plugin, although a launch from a cached image uses
// neither (bench/launch). Their functions are defined in our code as forwarders with the library's
// own names and signatures (SLIPWAY_LAZY_FORWARD), so callers keep calling `archive_read_new()`.
// Code about to use a library calls `load()` first for an error that names the package to install;
// a forwarder whose library could not load returns 0 / nullptr, which every caller treats as failure.
#pragma once

#include <mutex>
#include <string>

#include "common/status.h"

namespace slipway::launcher {

class LazyLibrary {
 public:
  // `soname` as dlopen(3) takes it ("libarchive.so.13"); `package` names what to install.
  LazyLibrary(const char* soname, const char* package) : soname_(soname), package_(package) {}
  LazyLibrary(const LazyLibrary&) = delete;
  LazyLibrary& operator=(const LazyLibrary&) = delete;

  // Loads the library once (thread-safe); the same answer every later time.
  Status load();
  // The address of `name` in the library, loading it first; nullptr if either fails.
  void* symbol(const char* name);

 private:
  const char* soname_;
  const char* package_;
  std::once_flag once_;
  void* handle_ = nullptr;
  Status status_;
};

}  // namespace slipway::launcher

// Defines `LazyLibrary& ACCESSOR()`, the one instance for SONAME (put it in namespace
// slipway::launcher).
#define SLIPWAY_LAZY_LIBRARY(ACCESSOR, SONAME, PACKAGE) \
  LazyLibrary& ACCESSOR() {                             \
    static LazyLibrary lib(SONAME, PACKAGE);            \
    return lib;                                         \
  }

// Defines `extern "C" RET NAME PARAMS` forwarding to NAME in LIB (a LazyLibrary&). The library's
// header must be included first: the compiler then checks our signature against its declaration.
// ARGS lists PARAMS' names in parentheses; FAIL is what to return when the library is missing (the
// library's own failure value: nullptr, ARCHIVE_FATAL, ...). The address is looked up once.
#define SLIPWAY_LAZY_FORWARD(LIB, RET, NAME, PARAMS, ARGS, FAIL)                  \
  extern "C" RET NAME PARAMS {                                                    \
    using Fn = RET(*) PARAMS;                                                     \
    static const Fn fn = reinterpret_cast<Fn>((LIB).symbol(#NAME));               \
    if (fn == nullptr) return FAIL;                                               \
    return fn ARGS;                                                               \
  }
#define SLIPWAY_LAZY_FORWARD_VOID(LIB, NAME, PARAMS, ARGS)                        \
  extern "C" void NAME PARAMS {                                                   \
    using Fn = void(*) PARAMS;                                                    \
    static const Fn fn = reinterpret_cast<Fn>((LIB).symbol(#NAME));               \
    if (fn != nullptr) fn ARGS;                                                   \
  }
