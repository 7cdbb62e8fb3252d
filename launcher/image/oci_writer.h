// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The OCI image-spec documents Slipway writes (image-spec manifest.md, config.md,
// image-index.md), in one place with one table of media types: the manifest and index of a
// --container-save archive (image/snapshot.h) and the manifest and config of a squashfs file
// imported as a one-layer image (image/import_squashfs.h). What we read is in image/manifest.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "image/manifest.h"

namespace slipway::launcher {

namespace media {
inline constexpr std::string_view kOciConfig = "application/vnd.oci.image.config.v1+json";
inline constexpr std::string_view kOciLayerTar = "application/vnd.oci.image.layer.v1.tar";
inline constexpr std::string_view kOciLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr std::string_view kOciLayerZstd = "application/vnd.oci.image.layer.v1.tar+zstd";
}  // namespace media

// The OCI name of a layer's media type: Docker's names (the same bytes) mapped, OCI's kept, ""
// for an empty one (the caller then looks at the blob: oci_layer_type_of_magic()).
std::string oci_layer_type(std::string_view media_type);
// A layer's type from its first bytes: gzip, zstd, else a plain tar.
std::string_view oci_layer_type_of_magic(const unsigned char magic[4]);

// An image manifest: CONFIG (whose media type is the OCI config's) and LAYERS, as JSON text.
std::string oci_manifest(const Descriptor& config, const std::vector<Descriptor>& layers);
// An index of one manifest, named REF_NAME (org.opencontainers.image.ref.name), for OS and
// ARCHITECTURE when both are given.
std::string oci_index(const Descriptor& manifest, const std::string& ref_name);
// The config of an image whose layers have DIFF_IDS, with ENV and ENTRYPOINT when not empty.
std::string oci_config(const std::vector<std::string>& diff_ids, const std::vector<std::string>& env,
                       const std::vector<std::string>& entrypoint);

}  // namespace slipway::launcher
