// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libFuzzer target: parse_image_ref (launcher/image/image_ref.h) on arbitrary text, as a user or a
// job script writes --container-image. Besides the sanitizers it checks that a registry reference
// that parsed prints (str()) as a reference that parses again to the same canonical text.
#include <cstdlib>

#include "fuzz_input.h"
#include "image/image_ref.h"

using slipway::launcher::ImageRef;
using slipway::launcher::parse_image_ref;
using slipway::launcher::RefDefaults;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RefDefaults defaults;
  defaults.cwd = "/work/dir";
  auto ref = parse_image_ref(slipway::fuzz::as_text(data, size), defaults);
  if (!ref.ok()) return 0;
  (void)slipway::launcher::is_valid_digest(ref->digest);
  std::string canonical = ref->str();
  if (ref->kind != ImageRef::Kind::kRegistry) return 0;
  auto again = parse_image_ref(canonical, defaults);
  if (!again.ok() || again->str() != canonical) std::abort();  // not stable under its own output
  return 0;
}
