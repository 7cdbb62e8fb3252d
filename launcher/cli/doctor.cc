// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// `slipway doctor [--cache-dir=DIR] [--registry=HOST:PORT]... [--host-libs=SPEC]
// [--slurm-plugin-dir=DIR] [--fabric-devices=LIST]`: checks this node for what Slipway needs
// (launcher/dl/doctor.h) and prints one line per check, with the fix for each failure. Exit status
// 1 when a check failed. Defaults come from the environment like the other commands
// (SLIPWAY_CACHE_DIR, SLIPWAY_DEFAULT_REGISTRY, SLIPWAY_INSECURE_REGISTRIES, SLIPWAY_HOST_LIBS,
// SLIPWAY_FABRIC_DEVICES).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "dl/doctor.h"
#include "image/cache.h"

namespace slipway::launcher::cli {
namespace {

Result<DoctorOptions> parse_doctor(const std::vector<std::string>& args) {
  DoctorOptions o;
  o.cache_dir = cache_dir();
  o.registries = env_list("SLIPWAY_INSECURE_REGISTRIES");
  std::string hostlibs = env_or("SLIPWAY_HOST_LIBS", "");
  std::string fabric = env_or("SLIPWAY_FABRIC_DEVICES", "default");
  std::string fabric_key = "SLIPWAY_FABRIC_DEVICES";
  for (const auto& a : args) {
    auto value = [&](const char* prefix) { return a.substr(std::string(prefix).size()); };
    if (a.rfind("--cache-dir=", 0) == 0) o.cache_dir = value("--cache-dir=");
    else if (a.rfind("--registry=", 0) == 0) o.registries.push_back(value("--registry="));
    else if (a.rfind("--host-libs=", 0) == 0) hostlibs = value("--host-libs=");
    else if (a.rfind("--slurm-plugin-dir=", 0) == 0) o.slurm_plugin_dir = value("--slurm-plugin-dir=");
    else if (a.rfind("--fabric-devices=", 0) == 0)
      fabric = value("--fabric-devices="), fabric_key = "--fabric-devices";
    else return Status::error("doctor: unknown option '" + a + "'; see 'slipway help'", EINVAL);
  }
  auto sets = parse_host_lib_sets(hostlibs);
  SLIPWAY_TRY(sets);
  o.host_lib_sets = std::move(*sets);
  auto policy = parse_fabric_policy(fabric, fabric_key);
  SLIPWAY_TRY(policy);
  o.fabric = std::move(*policy);
  return o;
}

}  // namespace

int cmd_doctor(std::vector<std::string>& args) {
  auto opts = parse_doctor(args);
  if (!opts.ok()) return fail(opts.status().message()), 2;
  auto findings = run_doctor(*opts);
  fputs(format_findings(findings).c_str(), stdout);
  return has_failures(findings) ? 1 : 0;
}

}  // namespace slipway::launcher::cli
