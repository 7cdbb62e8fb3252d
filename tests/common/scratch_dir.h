// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Scratch directories for unit tests: a fresh directory under /tmp, removed with everything in it
// when the test process exits. Check runs each test in its own child, which leaves through
// exit(3) whether the test passed or failed, so nothing is left behind either way.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

// `prefix` like "/tmp/libtrain-ckpt-"; returns "" when mkdtemp fails. Only the process that made
// a directory removes it: children it forks (ranks) may exit first.
inline std::string make_scratch_dir(const std::string& prefix) {
  static std::vector<std::string> made;
  static pid_t maker = 0;
  std::string tmpl = prefix + "XXXXXX";
  if (!mkdtemp(tmpl.data())) return "";
  if (made.empty()) {
    maker = getpid();
    atexit([] {
      if (getpid() != maker) return;
      std::error_code ec;
      for (const auto& dir : made) std::filesystem::remove_all(dir, ec);
    });
  }
  made.push_back(tmpl);
  return tmpl;
}
