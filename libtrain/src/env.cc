// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The environment parser of env.h: whole numbers digit by digit (strtoull would take a sign, leading
// spaces and wrap "-1" around), seconds through strtod after a character check, and the error
// message both share.
#include "env.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "libtrain/errors.h"

namespace libtrain::detail {
namespace {

// The value as the message shows it: one line whatever it holds, and not unboundedly long.
std::string shown(const char* value) {
  constexpr size_t kMaxShown = 64;
  std::string out;
  size_t n = 0;
  for (const char* p = value; *p && n < kMaxShown; ++p, ++n) {
    auto c = static_cast<unsigned char>(*p);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      char esc[5];
      std::snprintf(esc, sizeof(esc), "\\x%02x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (value[n]) out += "...";
  return out;
}

[[noreturn]] void reject(const char* name, const char* value, const std::string& expected) {
  throw InvalidArgument(std::string("libtrain: ") + name + "='" + shown(value) + "' must be " + expected);
}

}  // namespace

const char* env_text(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

uint64_t parse_whole(const char* name, const char* value, uint64_t min, uint64_t max, const char* unit) {
  std::string expected = std::string("a whole number ") + (*unit ? std::string("of ") + unit + " " : "") +
                         "from " + std::to_string(min) + " to " + std::to_string(max);
  if (!*value) reject(name, value, expected);
  uint64_t n = 0;
  for (const char* p = value; *p; ++p) {
    if (*p < '0' || *p > '9') reject(name, value, expected);
    auto digit = static_cast<uint64_t>(*p - '0');
    if (n > (std::numeric_limits<uint64_t>::max() - digit) / 10) reject(name, value, expected);
    n = n * 10 + digit;
  }
  if (n < min || n > max) reject(name, value, expected);
  return n;
}

uint64_t env_whole(const char* name, uint64_t fallback, uint64_t min, uint64_t max, const char* unit) {
  const char* v = env_text(name);
  return v ? parse_whole(name, v, min, max, unit) : fallback;
}

uint64_t env_whole_required(const char* name, uint64_t min, uint64_t max, const char* unit) {
  const char* v = env_text(name);
  if (!v) throw InvalidArgument(std::string("libtrain: ") + name + " is not set");
  return parse_whole(name, v, min, max, unit);
}

double parse_seconds(const char* name, const char* value, double max) {
  char bound[32];
  std::snprintf(bound, sizeof(bound), "%.0f", max);
  std::string expected = std::string("a number of seconds above 0 and at most ") + bound;
  // strtod alone would also take spaces, a sign, hex, "inf" and "nan".
  if (!((*value >= '0' && *value <= '9') || *value == '.') || std::strspn(value, "0123456789.eE+-") != std::strlen(value))
    reject(name, value, expected);
  char* end = nullptr;
  errno = 0;
  double s = std::strtod(value, &end);
  if (*end || errno == ERANGE || !std::isfinite(s) || !(s > 0) || s > max) reject(name, value, expected);
  return s;
}

double env_seconds(const char* name, double fallback, double max) {
  const char* v = env_text(name);
  return v ? parse_seconds(name, v, max) : fallback;
}

}  // namespace libtrain::detail
