// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Manifest, index and image-config parsing with nlohmann::json (exceptions are caught here and
// turned into Status: library code never throws on bad input).
#include "image/manifest.h"

#include <nlohmann/json.hpp>

#include "image/image_ref.h"

namespace slipway::launcher {
namespace {

using nlohmann::json;

Result<json> parse_json(std::string_view body, std::string_view what) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::error(std::string(what) + " is not a JSON object", EINVAL);
  return j;
}

int64_t int_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

std::string str_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<Descriptor> parse_descriptor(const json& j, std::string_view what) {
  if (!j.is_object()) return Status::error(std::string(what) + " is not an object", EINVAL);
  Descriptor d;
  d.media_type = str_field(j, "mediaType");
  d.digest = str_field(j, "digest");
  if (!is_valid_digest(d.digest))
    return Status::error(std::string(what) + " has no valid sha256 digest", EINVAL);
  auto size = j.find("size");
  if (size == j.end() || !size->is_number_unsigned())
    return Status::error(std::string(what) + " has no valid size", EINVAL);
  d.size = size->get<uint64_t>();
  if (auto p = j.find("platform"); p != j.end() && p->is_object()) {
    d.os = str_field(*p, "os");
    d.architecture = str_field(*p, "architecture");
    d.variant = str_field(*p, "variant");
  }
  return d;
}

bool is_layer_type(std::string_view t) {
  for (std::string_view ok :
       {"application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", ""})
    if (t == ok) return true;
  return false;
}

Result<std::vector<std::string>> string_list(const json& j, const char* key) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) return Status::error(std::string("image config ") + key + " is not a list");
  for (const auto& e : *it) {
    if (!e.is_string())
      return Status::error(std::string("image config ") + key + " has a non-string entry");
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

Result<ManifestKind> manifest_kind(std::string_view body, std::string_view content_type) {
  std::string_view ct = content_type.substr(0, content_type.find(';'));
  if (ct == media::kOciIndex || ct == media::kDockerList) return ManifestKind::kIndex;
  if (ct == media::kOciManifest || ct == media::kDockerManifest) return ManifestKind::kManifest;
  auto j = parse_json(body, "manifest");
  SLIPWAY_TRY(j);
  std::string mt = str_field(*j, "mediaType");
  if (mt == media::kOciIndex || mt == media::kDockerList) return ManifestKind::kIndex;
  if (mt == media::kOciManifest || mt == media::kDockerManifest) return ManifestKind::kManifest;
  if (j->contains("manifests")) return ManifestKind::kIndex;
  if (j->contains("layers")) return ManifestKind::kManifest;
  if (int_field(*j, "schemaVersion") == 1)
    return Status::error("schema-1 manifests are not supported; push the image again with a "
                         "current docker or skopeo", EINVAL);
  return Status::error("unknown manifest type '" + mt + "'", EINVAL);
}

Result<Manifest> parse_manifest(std::string_view body) {
  auto j = parse_json(body, "manifest");
  SLIPWAY_TRY(j);
  if (int_field(*j, "schemaVersion") != 2)
    return Status::error("manifest schemaVersion is not 2 (schema 1 is not supported)", EINVAL);
  Manifest m;
  auto cfg = j->find("config");
  if (cfg == j->end()) return Status::error("manifest has no config", EINVAL);
  auto c = parse_descriptor(*cfg, "manifest config");
  SLIPWAY_TRY(c);
  m.config = std::move(*c);
  auto layers = j->find("layers");
  if (layers == j->end() || !layers->is_array())
    return Status::error("manifest has no layer list", EINVAL);
  for (const auto& l : *layers) {
    auto d = parse_descriptor(l, "manifest layer");
    SLIPWAY_TRY(d);
    if (!is_layer_type(d->media_type))
      return Status::error("unsupported layer media type '" + d->media_type + "'", EINVAL);
    m.layers.push_back(std::move(*d));
  }
  return m;
}

Result<Descriptor> pick_platform(std::string_view index_body, std::string_view os,
                                 std::string_view arch) {
  auto j = parse_json(index_body, "image index");
  SLIPWAY_TRY(j);
  auto list = j->find("manifests");
  if (list == j->end() || !list->is_array())
    return Status::error("image index has no manifest list", EINVAL);
  std::string seen;
  for (const auto& e : *list) {
    auto d = parse_descriptor(e, "image index entry");
    SLIPWAY_TRY(d);
    if (d->os == os && d->architecture == arch) return std::move(*d);
    if (!d->os.empty()) seen += (seen.empty() ? "" : ", ") + d->os + "/" + d->architecture;
  }
  return Status::error("image has no " + std::string(os) + "/" + std::string(arch) +
                           " variant (it has: " + (seen.empty() ? "none" : seen) + ")",
                       ENOENT);
}

Result<ImageConfig> parse_image_config(std::string_view body) {
  auto j = parse_json(body, "image config");
  SLIPWAY_TRY(j);
  ImageConfig c;
  auto cfg = j->find("config");
  if (cfg == j->end() || cfg->is_null()) return c;
  if (!cfg->is_object()) return Status::error("image config 'config' is not an object", EINVAL);
  for (auto [key, out] : {std::pair{"Env", &c.env}, std::pair{"Entrypoint", &c.entrypoint},
                          std::pair{"Cmd", &c.cmd}}) {
    auto list = string_list(*cfg, key);
    SLIPWAY_TRY(list);
    *out = std::move(*list);
  }
  c.working_dir = str_field(*cfg, "WorkingDir");
  c.user = str_field(*cfg, "User");
  return c;
}

std::string image_config_to_json(const ImageConfig& c) {
  json j = {{"config",
             {{"Env", c.env},
              {"Entrypoint", c.entrypoint},
              {"Cmd", c.cmd},
              {"WorkingDir", c.working_dir},
              {"User", c.user}}}};
  return j.dump(2) + "\n";
}

}  // namespace slipway::launcher
