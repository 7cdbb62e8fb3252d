// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The seccomp filter installed in every container, as pyxis does (with --container-remap-root or
// not): calls only a real root may make (the chown family, set*id, setgroups, capset, mknod of
// device nodes) succeed as no-ops, so package managers (apt, dnf, pip installing setuid helpers)
// and archives with owners work in a container whose "root", or whose user, is the job user, as
// enroot and charliecloud do. Nothing is actually granted.
// The filter is compiled with libseccomp (loaded on first use) while still outside the container,
// and installed inside with seccomp(2) alone: no library is looked up in the image's filesystem.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace slipway::launcher {

// A classic BPF program, ready for seccomp(2).
struct SeccompProgram {
  std::vector<sock_filter> instructions;
};

// Compiles that filter for this architecture.
Result<SeccompProgram> compile_fake_root_filter();

// The same program, read from CACHE_FILE if an earlier call wrote it there, else compiled and
// written there (atomically; a write that fails is no error). Loading libseccomp and compiling
// cost about 0.27 ms of every `slipway run` start (13% of it, bench/launch); reading the few
// hundred bytes costs nothing measurable. Only for files the caller owns (the user's cache): the
// program only ever restricts the process that installs it.
Result<SeccompProgram> cached_fake_root_filter(const std::string& cache_file);
// Part of the cache file's name: bump it whenever the filter's rules change.
inline constexpr int kFakeRootFilterVersion = 1;
// Installs `program` on the calling thread (and what it execs). no_new_privs must be set first.
Status install_seccomp(const SeccompProgram& program);

// Both at once, for code that is not yet in a container (tests).
Status install_fake_root_filter();

}  // namespace slipway::launcher
