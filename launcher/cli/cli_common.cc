// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Shared pieces of the `slipway` subcommands (see cli_common.h).
#include "cli/cli_common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common/text.h"
#include "image/image_ref.h"

namespace slipway::launcher::cli {

int fail(const std::string& m) {
  fprintf(stderr, "slipway: %s\n", m.c_str());
  return 1;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::vector<std::string> env_list(const char* name) { return split_nonempty(env_or(name, ""), ','); }

bool env_flag(const char* name, bool fallback) {
  std::string v = env_or(name, "");
  if (v == "1" || v == "yes" || v == "true") return true;
  if (v == "0" || v == "no" || v == "false") return false;
  return fallback;
}

std::string cache_dir() {
  const std::string set = env_or("SLIPWAY_CACHE_DIR", "");
  if (!set.empty()) return set;
  std::string note;
  std::string dir = user_default_cache_dir(&note);
  static bool said = false;
  if (!note.empty() && !said) fprintf(stderr, "slipway: warning: %s\n", note.c_str());
  said = true;
  return dir;
}

ImportOptions import_options() {
  ImportOptions o;
  o.cache_dir = cache_dir();
  o.registry.insecure_registries = env_list("SLIPWAY_INSECURE_REGISTRIES");
  if (auto m = parse_registry_mirrors(env_or("SLIPWAY_REGISTRY_MIRRORS", "")); m.ok()) {
    o.registry.mirrors = std::move(*m);
  } else {
    // A site setting from the module file: nothing can be imported as the site meant it.
    fail("SLIPWAY_REGISTRY_MIRRORS: " + m.status().message());
    exit(2);
  }
  for (const auto& [var, key] : {std::pair{"SLIPWAY_REGISTRY_MIN_RATE", "registry_min_rate"},
                                 std::pair{"SLIPWAY_REGISTRY_TIMEOUT", "registry_timeout"},
                                 std::pair{"SLIPWAY_REGISTRY_MIRROR_TIMEOUT", "registry_mirror_timeout"}}) {
    std::string value = env_or(var, "");
    if (value.empty()) continue;
    if (Status st = parse_registry_limit(o.registry, key, value); !st.ok()) {
      fail(std::string(var) + ": " + st.message());
      exit(2);
    }
  }
  for (const auto& [var, key] : {std::pair{"SLIPWAY_MAX_IMAGE_SIZE", "max_image_size"},
                                 std::pair{"SLIPWAY_MAX_LAYER_RATIO", "max_layer_ratio"},
                                 std::pair{"SLIPWAY_MIN_FREE_SPACE", "min_free_space"}}) {
    std::string value = env_or(var, "");
    if (value.empty()) continue;
    if (Status st = parse_import_bound(o.bounds, key, value); !st.ok()) {
      fail(std::string(var) + ": " + st.message());  // a site setting: refuse rather than ignore it
      exit(2);
    }
  }
  o.registry.warn = [](const std::string& line) { fprintf(stderr, "slipway: %s\n", line.c_str()); };
  o.registry.ca_file = env_or("SLIPWAY_CA_FILE", "");
  std::string creds = env_or("HOME", "/") + "/.config/slipway/credentials";
  if (access(creds.c_str(), R_OK) == 0) o.registry.credentials_file = creds;
  if (isatty(STDERR_FILENO))
    o.progress = [](std::string_view line) {
      fprintf(stderr, "slipway: %.*s\n", static_cast<int>(line.size()), line.data());
    };
  return o;
}

Result<ImageRef> parse_text_ref(const std::string& text) {
  RefDefaults d;
  d.default_registry = env_or("SLIPWAY_DEFAULT_REGISTRY", std::string(kDockerHubRegistry));
  return parse_image_ref(text, d);
}

Result<ImportedImage> import_text(const std::string& text) {
  auto ref = parse_text_ref(text);
  SLIPWAY_TRY(ref);
  return import_image(*ref, import_options());
}

}  // namespace slipway::launcher::cli
