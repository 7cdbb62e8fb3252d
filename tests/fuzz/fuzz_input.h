// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Small helpers shared by the fuzz targets: the input as a string_view, and the input cut into
// fields at a separator byte (for targets whose production function takes several strings, such as
// option values or plugstack.conf arguments).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace slipway::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// TEXT cut at every SEP; an empty TEXT gives no field, a trailing SEP an empty last field.
inline std::vector<std::string> fields(std::string_view text, char sep) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t end = text.find(sep, start);
    out.emplace_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

}  // namespace slipway::fuzz
