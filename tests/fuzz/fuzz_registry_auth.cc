// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: what a registry and its token server send before any image byte
// (launcher/image/registry_auth.h): the WWW-Authenticate challenge, the token server's JSON
// answer, and the netrc-style credentials file a user writes. Each parser gets the whole input.
#include <cctype>

#include "fuzz_input.h"
#include "image/registry_auth.h"

namespace sl = slipway::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = slipway::fuzz::as_text(data, size);
  auto challenge = sl::parse_www_authenticate(text);
  if (challenge.ok()) {
    for (char c : challenge->scheme)  // the header promises a lowercased scheme
      if (std::isupper(static_cast<unsigned char>(c))) __builtin_trap();
    (void)challenge->params.count("realm");
  }
  (void)sl::parse_token_answer(text);
  auto creds = sl::parse_credentials(text);
  if (creds.ok()) {
    (void)sl::find_credentials(*creds, "registry.example.org:5000");
    (void)sl::find_credentials(*creds, "localhost");
  }
  return 0;
}
