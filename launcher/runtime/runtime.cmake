# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Container runtime sources: namespaces, mounts, pivot_root.
target_sources(slipway_runtime PRIVATE runtime/container.cc runtime/holder.cc runtime/mounts.cc
  runtime/seccomp.cc runtime/run_in.cc
  runtime/squashfs_mount.cc)
