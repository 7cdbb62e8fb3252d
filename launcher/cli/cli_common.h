// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// What the `slipway` subcommands share: one-line errors on stderr, settings from the environment
// (the module file sets them: SLIPWAY_CACHE_DIR, SLIPWAY_DEFAULT_REGISTRY, SLIPWAY_INSECURE_REGISTRIES,
// SLIPWAY_CA_FILE), and importing an image reference into the node cache.
#pragma once

#include <string>
#include <vector>

#include "image/import.h"

namespace slipway::launcher::cli {

// Prints "slipway: MESSAGE" on stderr; returns 1 (usage errors return 2 themselves).
int fail(const std::string& message);

std::string env_or(const char* name, const std::string& fallback);
std::vector<std::string> env_list(const char* name);
bool env_flag(const char* name, bool fallback);

ImportOptions import_options();

// The cache root: $SLIPWAY_CACHE_DIR, else the user's default (user_default_cache_dir: a private
// fallback when someone else made /var/tmp/slipway-<uid> first, said once on stderr).
std::string cache_dir();
// TEXT as an image reference, unqualified names on SLIPWAY_DEFAULT_REGISTRY (Docker Hub).
Result<ImageRef> parse_text_ref(const std::string& text);
Result<ImportedImage> import_text(const std::string& text);

int cmd_run(std::vector<std::string>& args);

}  // namespace slipway::launcher::cli
