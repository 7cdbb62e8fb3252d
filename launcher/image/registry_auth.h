// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Registry authentication pieces that need no network: the WWW-Authenticate challenge parser
// (RFC 7235 auth-params, as registries send them), the token server's JSON answer, and the
// netrc-style credentials file ("machine HOST login USER password PASS", one or more per file,
// whitespace separated). Pure functions over hostile bytes: fuzzed by tests/fuzz.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace slipway::launcher {

struct AuthChallenge {
  std::string scheme;                         // "bearer" or "basic" (lowercased)
  std::map<std::string, std::string> params;  // lowercase name -> unquoted value
};

Result<AuthChallenge> parse_www_authenticate(std::string_view header);

// The bearer token in a token server's JSON answer ("token", else "access_token"); "" when it
// holds none (not JSON, not an object, no string under either name).
std::string parse_token_answer(std::string_view body);

struct Credentials {
  std::string login, password;
  bool empty() const { return login.empty(); }
};

// Reads PATH; a missing file means no credentials (empty map), other errors fail.
// Keys are the "machine" names as written ("host" or "host:port"; "default" for the default entry).
Result<std::map<std::string, Credentials>> read_credentials_file(const std::string& path);
Result<std::map<std::string, Credentials>> parse_credentials(std::string_view text);

// The entry for REGISTRY ("host:port"): an exact match, else the host alone, else "default".
Credentials find_credentials(const std::map<std::string, Credentials>& creds,
                             std::string_view registry);

}  // namespace slipway::launcher
