// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Mount helpers for building a container root: safe creation of mount points inside a root that the
// image controls (no symlink may lead outside it), bind mounts by file descriptor, and recursive
// read-only / nosuid / nodev flags with mount_setattr(2).
#pragma once

#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace slipway::launcher {

enum class NodeKind { kDirectory, kFile };

// Opens (O_PATH) `path` below `root_fd`, resolving symlinks as if `root_fd` were "/" (RESOLVE_IN_ROOT),
// creating missing components as directories, and the last one as `kind`.
Result<UniqueFd> make_mount_point(int root_fd, const std::string& path, NodeKind kind);

struct BindFlags {
  bool recursive = true;       // carry the mounts below the source along (MS_REC)
  bool read_only = false;
  bool allow_devices = false;  // only for the device nodes of /dev: everything else is nodev
  bool no_exec = false;
};

// Bind-mounts `source` (host path) onto the object `target_fd` refers to with nosuid (and nodev
// unless allow_devices), read-only and noexec when asked. `what` names the mount in errors.
Status bind_onto(const std::string& source, int target_fd, BindFlags flags, const std::string& what);

// Writes DATA to PATH below `root_fd` (resolved as make_mount_point() does, never outside the
// root), replacing a regular file there; nothing when PATH's directory does not exist.
Status write_file_in_root(int root_fd, const std::string& path, const std::string& data);

// The root of the mount that a new mount at PATH (below `root_fd`, resolved as make_mount_point()
// does) would be attached to: PATH itself when it is a mount's root (the topmost there), else the
// nearest directory above it that is one. Opened O_PATH; PATH must exist.
Result<UniqueFd> open_mount_root(int root_fd, const std::string& path);

// "/proc/self/fd/N": the path that names exactly the inode behind fd N (mount(2) follows it).
std::string fd_path(int fd);

}  // namespace slipway::launcher
