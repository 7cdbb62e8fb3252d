// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Running a host tool as the calling user (sqfs2tar for squashfs images, docker or podman for
// their stores): argv only (never a shell), stdin from /dev/null, stdout into a descriptor,
// stderr kept for the error message, the size of what it writes bounded, a fixed environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/child.h"

namespace slipway::launcher {

// The absolute path of NAME in /usr/bin, /usr/local/bin or /bin; "" if it is in none.
std::string find_tool(const char* name);

// Runs ARGV (argv[0] an absolute path) with stdout into OUT_FD, KEEP_FD (-1: none) left open for
// it, no file it writes larger than MAX_OUTPUT bytes, and an environment of PATH=/usr/bin:/bin,
// LC_ALL=C and EXTRA_ENV (NAME=VALUE). Returns "" on success, else why it failed (its last line
// on stderr, or its status).
std::string run_tool(const std::vector<std::string>& argv, int out_fd, int keep_fd,
                     uint64_t max_output, const std::vector<std::string>& extra_env = {});

}  // namespace slipway::launcher
