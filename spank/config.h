// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Site configuration: the `key=value` arguments after the plugin's path in plugstack.conf, parsed
// from one table (kConfigKeys in config.cc); an unknown key is an error naming the key and the list
// of known ones, so a typo never silently falls back to a default.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "dl/dl_env.h"
#include "dl/fabric.h"
#include "dl/host_libs.h"
#include "options/job_options.h"
#include "image/import.h"
#include "image/registry.h"

namespace slipway::spank {

enum class ContainerScope { kJob, kGlobal };

struct PluginConfig {
  std::string cache_dir;         // empty: per user, /var/tmp/slipway-<uid>
  std::string runtime_dir;       // named containers' writable layers; empty: <cache>/containers
  std::string default_registry = "registry-1.docker.io";
  std::vector<std::string> insecure_registries;  // spoken to over plain HTTP
  std::map<std::string, std::string> registry_mirrors;  // registry_mirrors=: registry -> mirror
  std::string ca_file;           // extra CA bundle for registries
  launcher::ImportBounds import_bounds;  // max_image_size=, max_layer_ratio=, min_free_space=
  long registry_min_rate = 64 << 10;  // registry_min_rate=: bytes/s over 30 s (RegistryOptions)
  long registry_timeout_s = -1;   // registry_timeout=: RegistryOptions::timeout_s (-1: auto)
  long registry_mirror_timeout_s = 10;  // registry_mirror_timeout=: RegistryOptions::mirror_silence_s
  bool sbatch_support = false;   // run the batch script itself in the container
  bool execute_entrypoint = false;  // default of --container-entrypoint
  bool mount_home = true;        // default of --container-mount-home
  bool remap_root = false;       // default of --container-remap-root
  bool writable = false;         // default of --container-writable (enroot's ROOTFS_WRITABLE)
  ContainerScope container_scope = ContainerScope::kJob;  // lifetime of named containers
  std::string mounts;            // extra mounts for every container, --container-mounts syntax
  bool honor_pyxis_env = true;   // read PYXIS_CONTAINER_* as well as SLIPWAY_CONTAINER_*
  std::vector<launcher::HostLibSet> host_lib_sets;  // host_libs=: what --dl-host-libs may name
  bool host_libs_warn_only = false;  // host_libs_check=warn
  launcher::MpiAbiRule mpi_abi = launcher::MpiAbiRule::kFull;  // mpi_abi_check=
  launcher::PortRange master_ports;  // master_port_range=
  launcher::FabricPolicy fabric = launcher::default_fabric_policy();  // fabric_devices=
  launcher::DlGpus dl_gpus;          // dl_gpus=: the default of --dl-gpus (kUnset: NVIDIA_* decide)
};

launcher::Result<PluginConfig> parse_plugin_args(int argc, char** argv);

// "cache_dir=PATH  ...": one line per key, for the man page check and error messages.
std::string config_keys_help();

}  // namespace slipway::spank
