// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// plugstack.conf arguments (see config.h): one table of keys, each with its parser.
#include "config.h"

#include <array>
#include <string_view>

#include "common/text.h"
#include "image/registry.h"
#include "options/job_options.h"

namespace slipway::spank {
namespace {

using launcher::parse_mounts;
using launcher::Status;

Status set_absolute_path(std::string& out, std::string_view key, std::string_view v) {
  if (v.empty() || v[0] != '/')
    return Status::error(std::string(key) + "='" + std::string(v) + "' must be an absolute path",
                         EINVAL);
  out = std::string(v);
  return Status();
}

Status set_bool(bool& out, std::string_view key, std::string_view v) {
  if (v == "1" || v == "yes" || v == "true") out = true;
  else if (v == "0" || v == "no" || v == "false") out = false;
  else return Status::error(std::string(key) + "='" + std::string(v) + "' must be 1 or 0", EINVAL);
  return Status();
}

struct ConfigKey {
  const char* name;
  const char* help;
  Status (*apply)(PluginConfig&, std::string_view value);
};

constexpr std::array kConfigKeys = {
    ConfigKey{"cache_dir", "node-local image cache root (default /var/tmp/slipway-<uid>)",
              [](PluginConfig& c, std::string_view v) {
                return set_absolute_path(c.cache_dir, "cache_dir", v);
              }},
    ConfigKey{"default_registry", "registry for references without one (default Docker Hub)",
              [](PluginConfig& c, std::string_view v) {
                if (v.empty()) return Status::error("default_registry= needs a host[:port]", EINVAL);
                c.default_registry = std::string(v);
                return Status();
              }},
    ConfigKey{"insecure_registries", "comma-separated host[:port] list spoken to over plain HTTP",
              [](PluginConfig& c, std::string_view v) {
                c.insecure_registries = launcher::split_nonempty(v, ',');
                return Status();
              }},
    ConfigKey{"registry_mirrors", "pull-through mirrors, REGISTRY=MIRROR[,...] (host[:port] each; "
                                  "docker.io is Docker Hub): asked first, the registry if one fails",
              [](PluginConfig& c, std::string_view v) {
                auto m = launcher::parse_registry_mirrors(v);
                SLIPWAY_TRY(std::move(m).status().context("registry_mirrors"));
                c.registry_mirrors = std::move(*m);
                return Status();
              }},
    ConfigKey{"registry_min_rate", "abandon (then retry) a registry transfer averaging less than "
                                   "this per second over 30 s, e.g. 1M (default 64K; 0: never)",
              [](PluginConfig& c, std::string_view v) {
                launcher::RegistryOptions r;
                SLIPWAY_TRY(launcher::parse_registry_limit(r, "registry_min_rate", v));
                c.registry_min_rate = r.min_rate_bytes;
                return Status();
              }},
    ConfigKey{"registry_timeout", "seconds an import may spend on the registry, its lock wait "
                                  "included (default auto: 60 s + the declared size at "
                                  "registry_min_rate, at most 3600; 0: no deadline)",
              [](PluginConfig& c, std::string_view v) {
                launcher::RegistryOptions r;
                SLIPWAY_TRY(launcher::parse_registry_limit(r, "registry_timeout", v));
                c.registry_timeout_s = r.timeout_s;
                return Status();
              }},
    ConfigKey{"registry_mirror_timeout", "seconds a mirror may send nothing (no answer, or a body "
                                         "that stopped) before it is dropped for the registry "
                                         "(default 10; 1 to 3600)",
              [](PluginConfig& c, std::string_view v) {
                launcher::RegistryOptions r;
                SLIPWAY_TRY(launcher::parse_registry_limit(r, "registry_mirror_timeout", v));
                c.registry_mirror_timeout_s = r.mirror_silence_s;
                return Status();
              }},
    ConfigKey{"max_image_size", "largest unpacked image imported, e.g. 64G (the default)",
              [](PluginConfig& c, std::string_view v) {
                return launcher::parse_import_bound(c.import_bounds, "max_image_size", v);
              }},
    ConfigKey{"max_layer_ratio", "a layer may unpack to at most this many times its compressed "
                                 "size, from 16 MiB up (default 20; 0: no bound)",
              [](PluginConfig& c, std::string_view v) {
                return launcher::parse_import_bound(c.import_bounds, "max_layer_ratio", v);
              }},
    ConfigKey{"min_free_space", "an import fails rather than leave less than this free on the "
                                "cache's filesystem, e.g. 10G (default 1G; 0: none)",
              [](PluginConfig& c, std::string_view v) {
                return launcher::parse_import_bound(c.import_bounds, "min_free_space", v);
              }},
    ConfigKey{"ca_file", "extra CA bundle (PEM) trusted for registries",
              [](PluginConfig& c, std::string_view v) {
                return set_absolute_path(c.ca_file, "ca_file", v);
              }},
    ConfigKey{"runtime_dir", "node-local root of named containers (default <cache>/containers)",
              [](PluginConfig& c, std::string_view v) {
                return set_absolute_path(c.runtime_dir, "runtime_dir", v);
              }},
    ConfigKey{"sbatch_support", "1: #SBATCH --container-image runs the batch script itself in "
                                "the container (default 0)",
              [](PluginConfig& c, std::string_view v) {
                return set_bool(c.sbatch_support, "sbatch_support", v);
              }},
    ConfigKey{"execute_entrypoint", "default of --container-entrypoint (default 0)",
              [](PluginConfig& c, std::string_view v) {
                return set_bool(c.execute_entrypoint, "execute_entrypoint", v);
              }},
    ConfigKey{"mount_home", "default of --container-mount-home (default 1)",
              [](PluginConfig& c, std::string_view v) {
                return set_bool(c.mount_home, "mount_home", v);
              }},
    ConfigKey{"remap_root", "default of --container-remap-root (default 0)",
              [](PluginConfig& c, std::string_view v) {
                return set_bool(c.remap_root, "remap_root", v);
              }},
    ConfigKey{"writable", "default of --container-writable for unnamed containers (default 0; "
                          "enroot's ENROOT_ROOTFS_WRITABLE)",
              [](PluginConfig& c, std::string_view v) {
                return set_bool(c.writable, "writable", v);
              }},
    ConfigKey{"container_scope", "job (default): named containers end with the job; global: "
                                 "they persist across the user's jobs on the node",
              [](PluginConfig& c, std::string_view v) {
                if (v == "job") c.container_scope = ContainerScope::kJob;
                else if (v == "global") c.container_scope = ContainerScope::kGlobal;
                else return Status::error("container_scope='" + std::string(v) +
                                              "' must be job or global", EINVAL);
                return Status();
              }},
    ConfigKey{"mounts", "extra mounts for every container, --container-mounts syntax",
              [](PluginConfig& c, std::string_view v) {
                auto parsed = parse_mounts(v, "/");
                if (!parsed.ok()) return parsed.status();
                c.mounts = std::string(v);
                return Status();
              }},
    ConfigKey{"honor_pyxis_env", "1 (default): PYXIS_CONTAINER_* variables work as "
                                 "SLIPWAY_CONTAINER_* do",
              [](PluginConfig& c, std::string_view v) {
                return set_bool(c.honor_pyxis_env, "honor_pyxis_env", v);
              }},
    // Deep-learning wiring (launcher/dl, spank/dl_task.cc; issue 5).
    ConfigKey{"host_libs", "host library sets for --dl-host-libs: SET:LIB[,LIB...][;SET:...], "
                           "LIB a path, a soname or a directory",
              [](PluginConfig& c, std::string_view v) {
                auto sets = launcher::parse_host_lib_sets(v);
                if (!sets.ok()) return sets.status();
                c.host_lib_sets = std::move(*sets);
                return Status();
              }},
    ConfigKey{"host_libs_check", "error (default): a failed injection check fails the step; "
                                 "warn: it is printed and the step runs",
              [](PluginConfig& c, std::string_view v) {
                if (v != "error" && v != "warn")
                  return Status::error("host_libs_check='" + std::string(v) +
                                           "' is not 'error' or 'warn'", EINVAL);
                c.host_libs_warn_only = v == "warn";
                return Status();
              }},
    ConfigKey{"mpi_abi_check", "MPICH-ABI rule for injected MPI: major, full (default) or strict",
              [](PluginConfig& c, std::string_view v) {
                auto rule = launcher::parse_mpi_abi_rule(v);
                if (!rule.ok()) return rule.status();
                c.mpi_abi = *rule;
                return Status();
              }},
    ConfigKey{"dl_gpus", "default of --dl-gpus: N, auto or none; unset (the default): GPUs as "
                         "the container's NVIDIA_VISIBLE_DEVICES asks, as with pyxis+enroot",
              [](PluginConfig& c, std::string_view v) {
                auto g = launcher::parse_dl_gpus(v);
                if (!g.ok()) return g.status();
                c.dl_gpus = *g;
                return Status();
              }},
    ConfigKey{"master_port_range", "LO-HI range of MASTER_PORT (default 29500-29999)",
              [](PluginConfig& c, std::string_view v) {
                auto r = launcher::parse_port_range(v);
                if (!r.ok()) return r.status();
                c.master_ports = *r;
                return Status();
              }},
    ConfigKey{"fabric_devices",
              "the node's RDMA and fabric devices in every container, a list of: default "
              "(uverbs*, rdma_cm, cxi*, hfi1_*: the default), mad (umad*, issm*), none, "
              "/dev/PATTERN, -/dev/PATTERN to leave out",
              [](PluginConfig& c, std::string_view v) {
                auto p = launcher::parse_fabric_policy(v, "fabric_devices");
                if (!p.ok()) return p.status();
                c.fabric = std::move(*p);
                return Status();
              }},
};

}  // namespace

std::string config_keys_help() {
  std::string out;
  for (const auto& k : kConfigKeys) out += std::string(k.name) + "=  " + k.help + "\n";
  return out;
}

launcher::Result<PluginConfig> parse_plugin_args(int argc, char** argv) {
  PluginConfig cfg;
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i];
    size_t eq = arg.find('=');
    std::string_view key = arg.substr(0, eq);
    const ConfigKey* found = nullptr;
    for (const auto& k : kConfigKeys)
      if (key == k.name) found = &k;
    if (!found || eq == std::string_view::npos) {
      std::string known;
      for (const auto& k : kConfigKeys) known += std::string(known.empty() ? "" : ", ") + k.name;
      return Status::error("plugstack.conf: unknown argument '" + std::string(arg) +
                               "'; known keys (key=value): " + known,
                           EINVAL);
    }
    SLIPWAY_TRY(found->apply(cfg, arg.substr(eq + 1)).context("plugstack.conf"));
  }
  return cfg;
}

}  // namespace slipway::spank
