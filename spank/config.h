// Site configuration: the `key=value` arguments after the plugin's path in plugstack.conf, parsed
// from one table (kConfigKeys in config.cc); an unknown key is an error naming the key and the list
// of known ones, so a typo never silently falls back to a default.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace slipway::spank {

struct PluginConfig {
  std::string cache_dir;         // empty: per user, /var/tmp/slipway-<uid>
  std::string default_registry = "registry-1.docker.io";
  std::vector<std::string> insecure_registries;  // spoken to over plain HTTP
  std::string ca_file;           // extra CA bundle for registries
};

launcher::Result<PluginConfig> parse_plugin_args(int argc, char** argv);

// "cache_dir=PATH  ...": one line per key, for the man page check and error messages.
std::string config_keys_help();

}  // namespace slipway::spank
