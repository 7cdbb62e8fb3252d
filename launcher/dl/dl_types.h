// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Small shared vocabulary of the deep-learning wiring: a bind or a variable together with the
// reason it is there, so that --dl-explain prints exactly what the launch does and why.
#pragma once

#include <string>

#include "runtime/launch_spec.h"

namespace slipway::launcher {

struct PlannedBind {
  Bind bind;
  std::string why;
};

struct EnvSetting {
  std::string name, value, why;
  bool overwrite = true;  // false: a value the job already has wins
};

// The default location of the dl root paths: "/" on a node; a fake tree in tests.
// `in_root("/x", "/dev/nvidia0")` is "/x/dev/nvidia0"; `in_root("/", p)` is p.
inline std::string in_root(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return (root.back() == '/' ? root.substr(0, root.size() - 1) : root) + path;
}

}  // namespace slipway::launcher
