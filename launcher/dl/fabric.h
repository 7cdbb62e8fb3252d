// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// High-speed fabric devices in every container: the node's RDMA and fabric character devices
// (InfiniBand, RoCE and EFA verbs under /dev/infiniband, Slingshot's /dev/cxi*, Omni-Path's
// /dev/hfi1_*) bound at the same path into the container's /dev, so that NCCL, UCX and MPI use
// the fabric instead of TCP. Which devices: a list of glob patterns (the site's fabric_devices=
// key, SLIPWAY_FABRIC_DEVICES for `slipway run`); nothing here mounts anything.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "dl/dl_types.h"

namespace slipway::launcher {

// Device paths to expose: those matching an `include` pattern and no `exclude` pattern. A pattern
// is an absolute path under /dev whose last component may hold the glob(7) characters * ? [...].
struct FabricPolicy {
  std::vector<std::string> include;
  std::vector<std::string> exclude;
};

// Verbs (uverbs*: InfiniBand, RoCE, EFA), the RDMA connection manager, Slingshot, Omni-Path.
// Not the management datagram devices (umad*, issm*: subnet management, port state): those
// take the `mad` keyword or their own pattern.
inline constexpr const char* kDefaultFabricPatterns[] = {
    "/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm", "/dev/cxi*", "/dev/hfi1_*"};
inline constexpr const char* kMadFabricPatterns[] = {"/dev/infiniband/umad*",
                                                     "/dev/infiniband/issm*"};

FabricPolicy default_fabric_policy();

// A comma-separated list, read in order: `default` (kDefaultFabricPatterns), `mad`
// (kMadFabricPatterns), `none` (forget everything included so far), PATTERN (include it),
// -PATTERN (never expose what it matches). A list naming neither `default` nor `none` replaces
// the default. KEY names the setting in errors ("fabric_devices", "SLIPWAY_FABRIC_DEVICES").
Result<FabricPolicy> parse_fabric_policy(std::string_view value, std::string_view key);

// Whether PATH matches PATTERN (fnmatch(3) with FNM_PATHNAME: a glob never crosses a '/').
bool fabric_pattern_matches(const std::string& pattern, const std::string& path);
bool is_fabric_device_allowed(const FabricPolicy& policy, const std::string& path);

struct FabricPlan {
  std::vector<std::string> devices;  // host paths, sorted: the character devices bound
  std::vector<PlannedBind> binds;    // each at its own path, read-write, nosuid, devices usable
};

// The node's devices under ROOT ("/" on a node; a fake tree in tests) that POLICY exposes: only
// character devices (a directory, symlink or file a pattern matches is never bound).
FabricPlan plan_fabric(const std::string& root, const FabricPolicy& policy);

// What the node has under the usual fabric places (kDefaultFabricPatterns, kMadFabricPatterns)
// that POLICY leaves out, sorted: for `slipway doctor`.
std::vector<std::string> fabric_devices_left_out(const std::string& root,
                                                 const FabricPolicy& policy);

// The InfiniBand device a verbs node belongs to, as libibverbs reads it
// (/sys/class/infiniband_verbs/uverbsN/ibdev; umadN: /sys/class/infiniband_mad/umadN/ibdev);
// empty when sysfs does not say.
std::string fabric_ib_device(const std::string& root, const std::string& device);

}  // namespace slipway::launcher
