// The seccomp filter installed with --container-remap-root: calls only a real root may make (the
// chown family, set*id, setgroups, capset, mknod of device nodes) succeed as no-ops, so package
// managers (apt, dnf, pip installing setuid helpers) work in a container whose "root" is the job
// user, as enroot and charliecloud do. Nothing is actually granted.
#pragma once

#include "common/status.h"

namespace slipway::launcher {

// Installs the filter on the calling thread (and what it execs). no_new_privs must be set first.
Status install_fake_root_filter();

}  // namespace slipway::launcher
