// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// srun, sbatch and salloc (local and allocator contexts): validate the options before anything is
// queued, and pin the image's tag to a digest once for the whole job, so every node runs the same
// bytes and the registry sees one manifest request per job (docs/architecture.md, "The flow of
// one job step").
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "image/image_ref.h"
#include "image/manifest_handoff.h"
#include "image/registry.h"
#include "image/tag_memo.h"
#include "log.h"
#include "options/save.h"
#include "plugin_state.h"

namespace slipway::spank {
namespace {

launcher::RegistryOptions registry_options(const PluginConfig& cfg) {
  launcher::RegistryOptions r;
  r.insecure_registries = cfg.insecure_registries;
  r.mirrors = cfg.registry_mirrors;
  r.warn = [](const std::string& line) { log_user(line); };
  r.ca_file = cfg.ca_file;
  r.min_rate_bytes = cfg.registry_min_rate;
  r.timeout_s = cfg.registry_timeout_s;
  r.mirror_silence_s = cfg.registry_mirror_timeout_s;
  if (const char* home = getenv("HOME")) {
    std::string creds = std::string(home) + "/.config/slipway/credentials";
    if (access(creds.c_str(), R_OK) == 0) r.credentials_file = creds;
  }
  return r;
}

// Everything that can be checked before the job is queued: environment defaults, contradictions,
// and mount sources (the login node usually shares the file systems the nodes bind).
launcher::Status check_options(PluginState& st) {
  char buf[4096];
  std::string cwd = getcwd(buf, sizeof buf) ? buf : "/";
  SLIPWAY_TRY(apply_env_defaults(
      st.options,
      [](const std::string& name) -> std::optional<std::string> {
        const char* v = getenv(name.c_str());
        return v ? std::optional<std::string>(v) : std::nullopt;
      },
      st.config.honor_pyxis_env, cwd));
  SLIPWAY_TRY(validate_options(st.options));
  if (!st.options.save_path.empty()) SLIPWAY_TRY(launcher::check_save_target(st.options.save_path));
  for (const auto& m : st.options.mounts)
    if (m.is_bind() && access(m.source.c_str(), F_OK) != 0 && errno == ENOENT)  // else: the node says why
      return launcher::Status::error(
          launcher::mount_source_missing(m.source) + "; create it or fix the path", ENOENT);
  return launcher::Status();
}

// A pull-through mirror for the image's registry is warmed once, here, before the nodes ask it
// (image/registry.h warm_mirror): a cold docker-registry or Harbor mirror would otherwise fetch each
// blob from the registry once per node. A failed mirror is dropped with its warning line; the
// nodes then try it themselves and fall back as always, so the job goes on either way.
void warm_mirror_for_the_nodes(const PluginConfig& cfg, launcher::RegistryClient& client,
                               const std::string& manifest_body) {
  const auto& ref = client.ref();
  auto mirror = cfg.registry_mirrors.find(ref.registry);
  if (mirror == cfg.registry_mirrors.end()) return;
  auto warmed = launcher::warm_mirror(client, manifest_body);
  if (!warmed.ok()) {
    log_verbose("registry mirror " + mirror->second + " not warmed: " + warmed.status().message());
    return;
  }
  log_verbose("registry mirror " + mirror->second + " held " +
              std::to_string(warmed->blobs - warmed->fetched) + " of the " +
              std::to_string(warmed->blobs) + " blobs of '" + ref.str() + "' and fetched " +
              std::to_string(warmed->fetched) + " (" + std::to_string(warmed->bytes) + " bytes)");
}

}  // namespace

int client_init_post_opt(spank_t) {
  PluginState& st = state();
  if (auto checked = check_options(st); !checked.ok()) {
    log_error(checked.message());
    return -1;
  }
  // Relative paths were resolved here against this directory; the nodes use the same one.
  if (st.options.wants_container()) {
    char buf[4096];
    if (getcwd(buf, sizeof buf)) setenv(kEnvClientCwd, buf, 1);
  }
  if (st.options.container_image.empty()) return 0;
  launcher::RefDefaults defaults;
  defaults.default_registry = st.config.default_registry;
  auto ref = launcher::parse_image_ref(st.options.container_image, defaults);
  if (!ref.ok()) {
    log_error("--container-image: " + ref.status().message());
    return -1;
  }
  if (ref->kind != launcher::ImageRef::Kind::kRegistry) return 0;
  if (!ref->digest.empty()) {
    // Nothing to pin; only a mirror to warm, from the manifest the digest names.
    if (st.config.registry_mirrors.count(ref->registry) == 0) return 0;
    launcher::RegistryClient client(*ref, registry_options(st.config));
    if (auto manifest = client.fetch_platform_manifest(); manifest.ok())
      warm_mirror_for_the_nodes(st.config, client, manifest->body);
    return 0;
  }
  const std::string canonical = ref->str();
  // Inside an allocation (sbatch, salloc) the digest may already be pinned for this reference.
  const char* pinned_ref = getenv(kEnvImageRef);
  const char* pinned_digest = getenv(kEnvImageDigest);
  if (pinned_ref && pinned_digest && canonical == pinned_ref) return 0;
  // The user's cache on this host remembers what the tag named (image/tag_memo.h): the next
  // srun of the same tag asks the registry with HEAD only, which Docker Hub does not count as a
  // pull. Without a usable cache here, the tag is resolved as always.
  // Only the cache's root is made here (tag_memo makes tags/): a login node needs no more of it.
  launcher::NodeCache cache(cache_dir_for(st.config, getuid()));
  if (!cache.make_root().ok())
    cache = launcher::NodeCache("");
  launcher::RegistryClient client(*ref, registry_options(st.config));
  auto manifest = launcher::platform_manifest_by_tag(client, cache);
  if (!manifest.ok()) {
    log_error(launcher::import_failed(st.options.container_image, manifest.status()).message());
    return -1;
  }
  setenv(kEnvImageRef, canonical.c_str(), 1);
  setenv(kEnvImageDigest, manifest->digest.c_str(), 1);
  // The manifest bytes too (small, base64): nodes then make no manifest request at all.
  setenv(launcher::kManifestHandoffEnv,
         launcher::encode_manifest_handoff(manifest->body).c_str(), 1);
  log_verbose("image '" + canonical + "' is " + manifest->digest);
  warm_mirror_for_the_nodes(st.config, client, manifest->body);
  return 0;
}

}  // namespace slipway::spank
