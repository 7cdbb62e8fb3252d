// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The manifest hand-off: srun resolves an image's tag once per job and passes the manifest bytes
// to every node in the job environment (base64), so nodes need no manifest request at all. A node
// trusts the bytes only if their sha256 is the pinned digest (import_image checks it).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace slipway::launcher {

// The job environment variable that carries the manifest (next to SLIPWAY_IMAGE_DIGEST).
inline constexpr const char* kManifestHandoffEnv = "SLIPWAY_IMAGE_MANIFEST";
// Manifests above this are not handed off (nodes fetch them): the job environment stays small.
inline constexpr size_t kMaxHandoffBytes = 48 << 10;

// BODY as base64 (RFC 4648, padded); empty when BODY is empty or larger than kMaxHandoffBytes.
std::string encode_manifest_handoff(std::string_view body);
// The bytes back; EINVAL on a malformed value or one larger than kMaxHandoffBytes.
Result<std::string> decode_manifest_handoff(std::string_view text);

}  // namespace slipway::launcher
