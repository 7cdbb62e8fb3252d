// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The OCI documents Slipway writes (see oci_writer.h).
#include "image/oci_writer.h"

#include <nlohmann/json.hpp>

namespace slipway::launcher {
namespace {

using nlohmann::json;

// Docker media types the importer accepts, and their OCI names (the bytes are the same).
struct MediaTypeName {
  std::string_view docker, oci;
};
constexpr MediaTypeName kOciNames[] = {
    {"application/vnd.docker.image.rootfs.diff.tar.gzip", media::kOciLayerGzip},
    {"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
     "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"},
};

json descriptor(const Descriptor& d) {
  json j = {{"mediaType", d.media_type}, {"digest", d.digest}, {"size", d.size}};
  if (!d.os.empty() && !d.architecture.empty())
    j["platform"] = {{"os", d.os}, {"architecture", d.architecture}};
  return j;
}

// One way to print what we write: compact, invalid UTF-8 replaced rather than thrown on.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string oci_layer_type(std::string_view media_type) {
  for (const auto& n : kOciNames)
    if (media_type == n.docker) return std::string(n.oci);
  return std::string(media_type);
}

std::string_view oci_layer_type_of_magic(const unsigned char magic[4]) {
  if (magic[0] == 0x1f && magic[1] == 0x8b) return media::kOciLayerGzip;
  if (magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)
    return media::kOciLayerZstd;
  return media::kOciLayerTar;
}

std::string oci_manifest(const Descriptor& config, const std::vector<Descriptor>& layers) {
  json m = {{"schemaVersion", 2},
            {"mediaType", media::kOciManifest},
            {"config", descriptor(config)},
            {"layers", json::array()}};
  m["config"]["mediaType"] = media::kOciConfig;
  for (const auto& d : layers) m["layers"].push_back(descriptor(d));
  return dump(m);
}

std::string oci_index(const Descriptor& manifest, const std::string& ref_name) {
  json d = descriptor(manifest);
  d["mediaType"] = media::kOciManifest;
  d["annotations"] = {{"org.opencontainers.image.ref.name", ref_name}};
  return dump(
      {{"schemaVersion", 2}, {"mediaType", media::kOciIndex}, {"manifests", json::array({d})}});
}

std::string oci_config(const std::vector<std::string>& diff_ids, const std::vector<std::string>& env,
                       const std::vector<std::string>& entrypoint) {
  json c = {{"architecture", "amd64"}, {"os", "linux"}, {"config", json::object()},
            {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
  if (!env.empty()) c["config"]["Env"] = env;
  if (!entrypoint.empty()) c["config"]["Entrypoint"] = entrypoint;
  return dump(c);
}

}  // namespace slipway::launcher
