// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// OCI / Docker v2 manifest, index (manifest list) and image-config parsing. Pure functions over the
// JSON bytes so they can be unit-tested without a registry; every field is validated (digests,
// sizes, media types) because manifests are hostile input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace slipway::launcher {

struct ImageConfig {
  std::vector<std::string> env, entrypoint, cmd;
  std::string working_dir, user;
};

namespace media {
inline constexpr std::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kDockerList =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view kDockerManifest =
    "application/vnd.docker.distribution.manifest.v2+json";
// The Accept header for manifest requests: every type we can read.
inline constexpr std::string_view kManifestAccept =
    "application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json";
}  // namespace media

struct Descriptor {
  std::string media_type = {};
  std::string digest = {};
  uint64_t size = 0;
  std::string os = {}, architecture = {}, variant = {};  // index entries only
};

struct Manifest {
  Descriptor config;
  std::vector<Descriptor> layers;
};

enum class ManifestKind { kManifest, kIndex };

// Which kind a manifest body is: from Content-Type when given, else from the body's mediaType or
// shape (an index has "manifests", an image manifest "layers").
Result<ManifestKind> manifest_kind(std::string_view body, std::string_view content_type = {});

// The image manifest's config and layers. Layer media types must be tar, tar+gzip or tar+zstd
// (OCI or Docker spelling); schema-1 manifests are refused.
Result<Manifest> parse_manifest(std::string_view body);

// The digest of the entry for OS/ARCH in an index or manifest list.
Result<Descriptor> pick_platform(std::string_view index_body, std::string_view os = "linux",
                                 std::string_view arch = "amd64");

// The runtime part of an image config blob ("config": Env, Entrypoint, Cmd, WorkingDir, User).
Result<ImageConfig> parse_image_config(std::string_view body);

// ImageConfig as the small JSON object stored in the cache next to the rootfs, and back.
std::string image_config_to_json(const ImageConfig& c);

}  // namespace slipway::launcher
