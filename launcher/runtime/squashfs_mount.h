// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Squashfs images mounted instead of unpacked (issue 15): `--container-image=FILE.sqsh` (enroot's
// files and ours) becomes the overlay's lower layer through squashfuse_ll, inside the container's
// own user and mount namespaces, so a node starts a container without writing the image out.
//
// How: the process that owns the new namespaces (the holder, or `slipway run` alone) opens
// /dev/fuse, mounts a FUSE filesystem on its own descriptor (FUSE may be mounted in a user
// namespace, fs/fuse/inode.c FS_USERNS_MOUNT) and hands that descriptor to squashfuse_ll as
// "/dev/fd/N" (libfuse 3: the daemon serves an already-mounted connection). squashfuse_ll then
// needs no capability and no setuid fusermount. It dies with its parent (PR_SET_PDEATHSIG), and the
// mount lives only in the container's mount namespace: nothing is ever mounted on the node, and
// nothing is left once the step's processes are gone, whatever killed them.
#pragma once

#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace slipway::launcher {

// "" when the calling user can mount squashfs images here (squashfuse_ll installed, /dev/fuse
// readable and writable); else why not, as a clause that fits "cannot mount squashfs images: ...".
std::string squashfs_mount_unavailable();

// Mounts the squashfs file FILE (an absolute path, opened as the caller) read-only, served by a
// squashfuse_ll child: a detached mount (open_tree(2)-style descriptor) for move_mount(2). Call it
// in a user and mount namespace of the caller's own, with the capabilities they give. Returns once
// the mount answers, or the daemon's error; a daemon that has not answered in START_TIMEOUT_S
// (its file on a hung filesystem) is killed and that is the error: never a hang.
Result<UniqueFd> mount_squashfs(const std::string& file, unsigned start_timeout_s = 30);

}  // namespace slipway::launcher
