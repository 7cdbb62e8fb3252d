// plugstack.conf arguments (see config.h): one table of keys, each with its parser.
#include "config.h"

#include <array>
#include <string_view>

namespace slipway::spank {
namespace {

using launcher::Status;

std::vector<std::string> split_list(std::string_view v) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= v.size()) {
    size_t j = v.find(',', i);
    if (j == std::string_view::npos) j = v.size();
    if (j > i) out.emplace_back(v.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

Status set_absolute_path(std::string& out, std::string_view key, std::string_view v) {
  if (v.empty() || v[0] != '/')
    return Status::error(std::string(key) + "='" + std::string(v) + "' must be an absolute path",
                         EINVAL);
  out = std::string(v);
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
                c.insecure_registries = split_list(v);
                return Status();
              }},
    ConfigKey{"ca_file", "extra CA bundle (PEM) trusted for registries",
              [](PluginConfig& c, std::string_view v) {
                return set_absolute_path(c.ca_file, "ca_file", v);
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
