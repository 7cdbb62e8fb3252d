// Splitting the comma lists of options, plugstack.conf keys and environment variables: one
// implementation for the plugin, `slipway` and the option parser.
#pragma once

#include <algorithm>
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

}  // namespace slipway::launcher
