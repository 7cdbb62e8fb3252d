// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: the site settings a plugstack.conf key or a SLIPWAY_* variable carries as
// text: registry mirror lists (parse_registry_mirrors), sizes (parse_size), import bounds
// (parse_import_bound) and registry transfer limits (parse_registry_limit). Each gets the input.
#include "fuzz_input.h"
#include "image/cache.h"
#include "image/import.h"
#include "image/registry.h"

namespace sl = slipway::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = slipway::fuzz::as_text(data, size);
  (void)sl::parse_registry_mirrors(text);
  (void)sl::parse_size(text);
  sl::ImportBounds bounds;
  for (std::string_view key : {"max_image_size", "max_layer_ratio", "min_free_space", "other"})
    (void)sl::parse_import_bound(bounds, key, text);
  sl::RegistryOptions registry;
  for (std::string_view key : {"registry_min_rate", "registry_timeout", "registry_mirror_timeout", "other"})
    (void)sl::parse_registry_limit(registry, key, text);
  return 0;
}
