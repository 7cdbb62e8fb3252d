// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// ImageRef: an image reference as users write it (`ubuntu`, `host:5000/a/b:t@sha256:...`,
// `docker://...`, `./img.tar`, an OCI layout directory), parsed and normalised the way Docker does.
// The grammar is documented at parse_image_ref() below and in man/slipway.1.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace slipway::launcher {

struct ImageRef {
  // kDaemon: an image in the node's Docker daemon (dockerd://NAME) or the user's Podman store
  // (podman://NAME), exported with `docker save` / `podman save` (enroot's and pyxis's schemes).
  enum class Kind { kRegistry, kArchive, kOciLayout, kDaemon };
  Kind kind = Kind::kRegistry;
  std::string registry;    // "registry-1.docker.io", "10.77.0.1:5000", ...
  std::string repository;  // "library/ubuntu", "slipway/busybox"
  std::string tag;         // "latest" when none given and no digest
  std::string digest;      // "sha256:<64 hex>" or empty
  std::string path;        // for kArchive / kOciLayout: absolute path
  std::string daemon;      // for kDaemon: "docker" or "podman"; repository holds NAME as given
  std::string origin;      // what an archive was made from ("podman://NAME"), shown for it
  std::string str() const; // canonical "registry/repo:tag@digest" (or the path)
};

struct RefDefaults {
  std::string default_registry = "registry-1.docker.io";
  std::string cwd;  // base for relative paths; empty: the process's working directory
};

inline constexpr std::string_view kDockerHubRegistry = "registry-1.docker.io";

// Grammar (Docker's, plus local files):
//   [docker://] [REGISTRY/] REPO [:TAG] [@sha256:HEX64]
//     REGISTRY is the first component when it contains '.' or ':' or is "localhost";
//     "docker.io" and "index.docker.io" mean registry-1.docker.io, where one-component names get
//     "library/". REPO components: [a-z0-9]+ joined by '.', '_', '__' or '-'+. TAG: [A-Za-z0-9_]
//     then up to 127 of [A-Za-z0-9_.-].
//   dockerd://NAME | podman://NAME      an image of the node's Docker daemon or Podman store
//   docker-archive:PATH | oci-archive:PATH | oci:PATH | PATH starting with '/', './' or '../'
//     A PATH ending in .tar, .tar.gz, .tgz or .tar.zst is an archive, anything else an OCI layout
//     directory. Relative paths are made absolute against defaults.cwd.
Result<ImageRef> parse_image_ref(std::string_view text, const RefDefaults& defaults = {});

// "sha256:" followed by exactly 64 lowercase hex digits.
bool is_valid_digest(std::string_view digest);

}  // namespace slipway::launcher
