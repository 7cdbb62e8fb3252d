// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: the manifest, index and image-config parsers (launcher/image/manifest.h) on
// arbitrary bytes, as a registry or an OCI layout sends them. The first byte picks the
// Content-Type the body is said to have; the rest is the body given to every parser.
#include <array>

#include "fuzz_input.h"
#include "image/image_ref.h"
#include "image/manifest.h"

namespace sl = slipway::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::array<std::string_view, 6> kTypes = {
      "", sl::media::kOciIndex, sl::media::kOciManifest, sl::media::kDockerList,
      sl::media::kDockerManifest, "application/vnd.docker.distribution.manifest.v1+prettyjws"};
  if (size == 0) return 0;
  std::string_view content_type = kTypes[data[0] % kTypes.size()];
  std::string_view body = slipway::fuzz::as_text(data + 1, size - 1);
  auto kind = sl::manifest_kind(body, content_type);
  (void)sl::manifest_kind(body);
  auto manifest = sl::parse_manifest(body);
  if (manifest.ok()) {
    for (const auto& layer : manifest->layers)
      if (!sl::is_valid_digest(layer.digest)) __builtin_trap();  // parse_manifest promises valid digests
  }
  (void)sl::pick_platform(body);
  (void)sl::pick_platform(body, "linux", "arm64");
  auto config = sl::parse_image_config(body);
  if (config.ok()) (void)sl::image_config_to_json(*config);
  (void)kind;
  return 0;
}
