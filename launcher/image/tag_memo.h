// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Tags resolved without a pull: the node cache remembers, per image reference, the digest the tag
// named and the image manifest it led to (<cache>/tags/<sha256 of the reference>). The next
// resolution asks the registry with HEAD only; when the registry names the same digest, the
// remembered manifest is used. A HEAD is not a pull for Docker Hub's rate limit, and costs no
// body. Any doubt (no memo, a registry that does not say the digest, a tag that moved, a memo
// that does not verify) falls back to the GETs of fetch_platform_manifest(), which renew the memo.
#pragma once

#include <string>

#include "common/status.h"
#include "image/cache.h"
#include "image/registry.h"

namespace slipway::launcher {

// The image manifest CLIENT's tag names now (CLIENT's ref has a tag and no digest). CACHE may be
// an empty root: then nothing is remembered.
Result<FetchedManifest> platform_manifest_by_tag(RegistryClient& client, const NodeCache& cache);

}  // namespace slipway::launcher
