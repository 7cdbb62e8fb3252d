// Entering a container in-process: the calling (single-threaded) process moves into a new user and
// mount namespace whose root is an overlay of the image, then pivot_root()s into it. Used by the
// SPANK plugin in task_init (slurmstepd then execs the user's command inside) and by `slipway run`.
#pragma once

#include "common/status.h"
#include "runtime/launch_spec.h"

namespace slipway::launcher {

// Moves the calling process into the container described by `spec`. On success the process's root
// and working directory are inside the image and it holds no privilege outside its user namespace.
// On failure the process may be left in a half-built namespace of its own (nothing outside it is
// touched); the caller must not exec the user's program then.
Status enter_container(const LaunchSpec& spec);

// True when `path` (absolute, inside the container root `root_fd`) resolves to a location inside the
// root without following any symlink that leaves it (openat2 RESOLVE_IN_ROOT semantics).
bool is_inside_root(int root_fd, const std::string& path);

}  // namespace slipway::launcher
