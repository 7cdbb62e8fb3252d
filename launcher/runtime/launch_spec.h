// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// LaunchSpec: everything the runtime needs to put a process into a container, as plain data.
// The SPANK plugin and the `slipway` command fill it from their options; the runtime knows nothing of
// Slurm (docs/architecture.md: launcher/ knows nothing of Slurm).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace slipway::launcher {

// One bind mount from the host into the container.
struct Bind {
  std::string source;       // absolute host path
  std::string destination;  // absolute path inside the container
  bool read_only = false;
  bool recursive = true;    // MS_REC: also bind the mounts below source
  bool optional = false;    // skip quietly when the source does not exist
  bool allow_devices = false;  // device nodes under it stay usable (only for GPU devices)
  bool no_exec = false;        // MOUNT_ATTR_NOEXEC (--container-mounts flag noexec)
  bool unbindable = false;     // MS_UNBINDABLE (--container-mounts flag unbindable)
  std::string tmpfs_options = {};  // with tmpfs: mount options added to "mode=1777"
  bool tmpfs = false;          // a fresh tmpfs at destination (source "tmpfs")
  bool detach = false;         // remove the mount at destination (source "umount")
};

// A small file written into the container's root, where its directory exists in the image: it
// lands in the overlay's upper layer, never in the cached image.
struct GeneratedFile {
  std::string path;  // absolute, inside the container
  std::string content;
};

struct LaunchSpec {
  std::string rootfs;       // the unpacked image (never modified: an overlay sits on top)
  std::string squashfs_file;  // instead of rootfs: a squashfs image file, mounted read-only as
                              // the overlay's lower layer (runtime/squashfs_mount.h)
  std::string scratch_dir;  // an existing directory owned by the user, used as a private mount point
  uid_t uid = 0;            // the job user outside
  gid_t gid = 0;
  bool remap_root = false;  // map the user to 0 inside (--container-remap-root)
  bool writable = false;    // keep the overlay writable (tmpfs upper, thrown away at exit)
  std::string persistent_dir;  // a named container: the overlay's upper and work dirs live here
                               // and outlive the step; empty: a tmpfs upper
  bool unshare_net = false;    // the container's own network namespace (only loopback, up)
  bool unshare_ipc = false;    // its own System V IPC and POSIX message queues
  bool unshare_uts = false;    // its own host name (kept equal to the node's)
  std::vector<Bind> binds;  // applied in order, after /dev, /proc, /sys
  std::string workdir;      // chdir target inside; empty: "/"
  std::vector<std::string> host_files;  // files copied from the host if present (/etc/hosts, ...)
  std::vector<GeneratedFile> files;     // written after the binds, before the root turns read-only
};

}  // namespace slipway::launcher
