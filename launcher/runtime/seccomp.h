// The seccomp filter installed in every container, as pyxis does (with --container-remap-root or
// not): calls only a real root may make (the chown family, set*id, setgroups, capset, mknod of
// device nodes) succeed as no-ops, so package managers (apt, dnf, pip installing setuid helpers)
// and archives with owners work in a container whose "root", or whose user, is the job user, as
// enroot and charliecloud do. Nothing is actually granted.
// The filter is compiled with libseccomp (loaded on first use) while still outside the container,
// and installed inside with seccomp(2) alone: no library is looked up in the image's filesystem.
#pragma once

#include <linux/filter.h>

#include <vector>

#include "common/status.h"

namespace slipway::launcher {

// A classic BPF program, ready for seccomp(2).
struct SeccompProgram {
  std::vector<sock_filter> instructions;
};

// Compiles that filter for this architecture.
Result<SeccompProgram> compile_fake_root_filter();
// Installs `program` on the calling thread (and what it execs). no_new_privs must be set first.
Status install_seccomp(const SeccompProgram& program);

// Both at once, for code that is not yet in a container (tests).
Status install_fake_root_filter();

}  // namespace slipway::launcher
