// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// `slipway doctor`: checks that a node can run Slipway's containers and says exactly what is
// wrong and how to fix it. Also run by the plugin when a launch fails, to name the root cause.
// Checks that need a kernel feature try it for real in a forked child (a user namespace, an
// overlay mount inside one, dlopen of a host library) rather than guessing from settings, and then
// read the settings to explain a failure.
#pragma once

#include <string>
#include <vector>

#include "dl/fabric.h"
#include "dl/host_libs.h"

namespace slipway::launcher {

enum class Verdict { kOk, kWarn, kFail, kSkip };

struct Finding {
  std::string check;   // "userns", "overlay", "cache", "registry", "pmix", "gpus", "hostlibs:mpi"
  Verdict verdict = Verdict::kOk;
  std::string detail;  // what was seen
  std::string fix;     // how to fix it (empty when nothing is to fix)
};

struct DoctorOptions {
  std::string cache_dir;                     // the node cache to check; empty: skip
  std::vector<std::string> registries;       // host:port to reach
  std::vector<HostLibSet> host_lib_sets;     // configured host libraries
  std::string slurm_plugin_dir = "/usr/lib/x86_64-linux-gnu/slurm-wlm";
  std::string root = "/";                    // /dev, /proc, /sys root for the GPU check
  FabricPolicy fabric = default_fabric_policy();  // fabric_devices= / SLIPWAY_FABRIC_DEVICES
  int timeout_ms = 2000;                     // per network check
  // The running Slurm's version ("slurm 22.05.8"), checked against the tested releases
  // (dl/slurm_versions.h); empty: `sinfo --version` is asked.
  std::string slurm_version;
};

std::vector<Finding> run_doctor(const DoctorOptions& opts);

// Individual checks, for the plugin and tests.
Finding check_user_namespaces();
Finding check_overlay_in_userns();
Finding check_fuse_in_userns();  // squashfs images mounted (runtime/squashfs_mount.h)
Finding check_cache_dir(const std::string& dir);
Finding check_registry(const std::string& host_port, int timeout_ms);
Finding check_slurm_pmix(const std::string& plugin_dir);
Finding check_gpus(const std::string& root);
// The fabric devices POLICY binds into containers, those it leaves out, and RLIMIT_MEMLOCK
// (dl/fabric.cc).
Finding check_fabric(const std::string& root, const FabricPolicy& policy);
std::vector<Finding> check_host_libs(const std::vector<HostLibSet>& sets);

// "ok    userns: ...\nFAIL  overlay: ...; fix: ...\n".
std::string format_findings(const std::vector<Finding>& findings);
bool has_failures(const std::vector<Finding>& findings);

}  // namespace slipway::launcher
