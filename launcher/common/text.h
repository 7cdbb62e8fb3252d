// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Splitting the comma lists of options, plugstack.conf keys and environment variables, and
// writing byte counts for people: one implementation for the plugin, `slipway` and the launcher.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace slipway::launcher {

// Every field of `v` between `sep`s, empty ones included ("a,,b" gives "a", "", "b"; "" gives "").
inline std::vector<std::string_view> split(std::string_view v, char sep) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i <= v.size()) {
    size_t j = std::min(v.find(sep, i), v.size());
    out.push_back(v.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// The non-empty fields, as strings ("a,,b," gives "a", "b"; "" gives nothing).
inline std::vector<std::string> split_nonempty(std::string_view v, char sep) {
  std::vector<std::string> out;
  for (auto field : split(v, sep))
    if (!field.empty()) out.emplace_back(field);
  return out;
}

// 1023 B, 1.0 KiB, 20.5 MiB, 3.2 GiB (powers of 1024).
inline std::string human_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace slipway::launcher
