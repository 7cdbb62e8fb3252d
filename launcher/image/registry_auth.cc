// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// WWW-Authenticate parsing, token answers and the credentials file (see registry_auth.h).
#include "image/registry_auth.h"


#include <cctype>

#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace slipway::launcher {

std::string parse_token_answer(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  std::string token;
  if (j.is_object()) {
    for (const char* key : {"token", "access_token"})
      if (auto it = j.find(key); it != j.end() && it->is_string() && token.empty())
        token = it->get<std::string>();
  }
  return token;
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

void skip_space(std::string_view s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == ',')) ++i;
}

// A quoted-string with backslash escapes, or a token up to ',' / space.
Result<std::string> read_value(std::string_view s, size_t& i) {
  std::string v;
  if (i < s.size() && s[i] == '"') {
    for (++i; i < s.size() && s[i] != '"'; ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) ++i;
      v += s[i];
    }
    if (i >= s.size()) return Status::error("unterminated quoted string in WWW-Authenticate");
    ++i;
    return v;
  }
  while (i < s.size() && s[i] != ',' && s[i] != ' ' && s[i] != '\t') v += s[i++];
  return v;
}

}  // namespace

Result<AuthChallenge> parse_www_authenticate(std::string_view h) {
  AuthChallenge c;
  size_t i = 0;
  skip_space(h, i);
  size_t start = i;
  while (i < h.size() && h[i] != ' ') ++i;
  c.scheme = lower(h.substr(start, i - start));
  if (c.scheme.empty()) return Status::error("empty WWW-Authenticate header", EINVAL);
  for (;;) {
    skip_space(h, i);
    if (i >= h.size()) break;
    size_t eq = h.find('=', i);
    if (eq == std::string_view::npos) return Status::error("bad WWW-Authenticate parameter");
    std::string name = lower(h.substr(i, eq - i));
    i = eq + 1;
    auto v = read_value(h, i);
    SLIPWAY_TRY(v);
    c.params[name] = std::move(*v);
  }
  return c;
}

Result<std::map<std::string, Credentials>> parse_credentials(std::string_view text) {
  std::map<std::string, Credentials> out;
  std::string machine;
  std::string* want = nullptr;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i < text.size() && text[i] == '#') {  // comment to end of line
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    size_t b = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view tok = text.substr(b, i - b);
    if (tok.empty()) break;
    if (want) {
      *want = std::string(tok);
      want = nullptr;
    } else if (tok == "machine") {
      want = &machine;
    } else if (tok == "default") {
      machine = "default";
    } else if ((tok == "login" || tok == "password") && !machine.empty()) {
      want = tok == "login" ? &out[machine].login : &out[machine].password;
    } else {
      return Status::error("credentials file: unexpected '" + std::string(tok) +
                               "' (expected: machine HOST login USER password PASS)", EINVAL);
    }
  }
  if (want) return Status::error("credentials file ends in the middle of an entry", EINVAL);
  return out;
}

Result<std::map<std::string, Credentials>> read_credentials_file(const std::string& path) {
  if (path.empty()) return std::map<std::string, Credentials>{};
  auto text = read_file_limited(path, 1u << 20, Symlinks::kFollow);
  if (!text.ok() && text.status().error_number() == ENOENT) return std::map<std::string, Credentials>{};
  if (!text.ok()) return text.status().context("credentials file");
  auto creds = parse_credentials(*text);
  if (!creds.ok()) return creds.status().context(path);
  return creds;
}

Credentials find_credentials(const std::map<std::string, Credentials>& creds,
                             std::string_view registry) {
  std::string key(registry);
  if (auto it = creds.find(key); it != creds.end()) return it->second;
  if (auto it = creds.find(key.substr(0, key.find(':'))); it != creds.end()) return it->second;
  if (auto it = creds.find("default"); it != creds.end()) return it->second;
  return {};
}

}  // namespace slipway::launcher
