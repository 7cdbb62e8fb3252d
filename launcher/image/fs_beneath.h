// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// File-system helpers that never leave a directory tree: archive path cleaning, opening a
// directory beneath a root fd without following any symlink (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS, or a component-by-component O_NOFOLLOW walk on kernels without openat2),
// and recursive removal that never follows symlinks.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace slipway::launcher {

// An archive entry path made relative and canonical: leading '/' and './' stripped (the OCI layer
// spec treats absolute paths as relative to the root), '.' and empty components dropped, trailing
// '/' removed. A '..' component is an error. "" is the root itself.
Result<std::string> clean_entry_path(std::string_view path);

// Splits a clean path into its parent ("" for the root) and last component.
std::pair<std::string_view, std::string_view> split_parent(std::string_view clean);

// An O_PATH fd of directory DIR (a clean relative path) beneath ROOTFD. No component may be a
// symlink (ELOOP) or a non-directory (ENOTDIR). When CREATE is set, missing components are made
// with mode 0755.
Result<UniqueFd> open_dir_beneath(int rootfd, std::string_view dir, bool create);

// Removes NAME in DIRFD; a directory recursively. Symlinks are removed, never followed.
// A missing NAME is not an error. Uses a bounded number of descriptors (about 34) however deep
// the tree; below 32 levels it climbs back through "..", checked against the way down.
Status remove_tree_at(int dirfd, const char* name);

}  // namespace slipway::launcher
