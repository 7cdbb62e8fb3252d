// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// curl_api(): dlopen libcurl.so.4 once and resolve the functions of CurlApi (see curl_api.h).
#include "image/curl_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace slipway::launcher {
namespace {

template <class F>
bool resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

Result<const CurlApi*> load() {
  static CurlApi api;
  void* lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return Status::error(std::string("cannot load libcurl to reach a registry: ") + dlerror() +
                             "; install libcurl4 (Debian) or libcurl (RHEL)",
                         ELIBACC);
  const bool ok = resolve(lib, "curl_global_init", api.global_init) &&
                  resolve(lib, "curl_easy_init", api.easy_init) &&
                  resolve(lib, "curl_easy_setopt", api.easy_setopt) &&
                  resolve(lib, "curl_easy_getinfo", api.easy_getinfo) &&
                  resolve(lib, "curl_easy_perform", api.easy_perform) &&
                  resolve(lib, "curl_easy_reset", api.easy_reset) &&
                  resolve(lib, "curl_easy_cleanup", api.easy_cleanup) &&
                  resolve(lib, "curl_easy_strerror", api.easy_strerror) &&
                  resolve(lib, "curl_slist_append", api.slist_append) &&
                  resolve(lib, "curl_slist_free_all", api.slist_free_all);
  if (!ok) return Status::error("libcurl.so.4 lacks a function Slipway needs; update libcurl", ELIBBAD);
  if (api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return Status::error("libcurl failed to initialise", EIO);
  return &api;  // the library stays loaded for the life of the process
}

}  // namespace

Result<const CurlApi*> curl_api() {
  static std::once_flag once;
  static Result<const CurlApi*> loaded = Status::error("not loaded", EIO);
  std::call_once(once, [] { loaded = load(); });
  return loaded;
}

}  // namespace slipway::launcher
