// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The libcurl functions Slipway uses, loaded with dlopen(3) on first use rather than linked: libcurl
// brings some thirty libraries (Kerberos, LDAP, ICU, ...) that every `slipway` start, and every
// srun through the plugin, would otherwise load although most never talk to a registry
// (bench/launch measured ~10 ms of start-up for them).
#pragma once

#include <curl/curl.h>

#include "common/status.h"

namespace slipway::launcher {

struct CurlApi {
  CURLcode (*global_init)(long flags);
  CURL* (*easy_init)();
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  CURLcode (*easy_perform)(CURL*);
  void (*easy_reset)(CURL*);
  void (*easy_cleanup)(CURL*);
  const char* (*easy_strerror)(CURLcode);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
};

// Loads libcurl.so.4 once (thread-safe) and initialises it; the error names the fix.
Result<const CurlApi*> curl_api();

}  // namespace slipway::launcher
