// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// What a container's NVIDIA_* variables ask for, as libnvidia-container's runtime documents them
// (NVIDIA/nvidia-container-runtime README.md, "Environment variables (OCI spec)") and as enroot's
// hook reads them (NVIDIA/enroot conf/hooks/98-nvidia.sh): which GPUs, which driver capabilities,
// which driver/CUDA versions the image needs; and the node's driver those are checked against.
// Pure functions of strings and of a root directory ("/" on a node, a stand-in tree in tests).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "dl/ld_cache.h"

namespace slipway::launcher {

// NVIDIA_DRIVER_CAPABILITIES, as bits.
enum Capability : unsigned {
  kCapCompute = 1u << 0,   // CUDA and OpenCL
  kCapUtility = 1u << 1,   // nvidia-smi and NVML
  kCapVideo = 1u << 2,     // Video Codec SDK
  kCapGraphics = 1u << 3,  // OpenGL, Vulkan
  kCapDisplay = 1u << 4,   // X display driver
  kCapCompat32 = 1u << 5,  // the 32-bit libraries of the other selected capabilities
  kCapAll = (1u << 6) - 1,
};

struct NvidiaRequest {
  // NVIDIA_VISIBLE_DEVICES: unset, empty or "void": no GPU, no driver (as runc); "none": the
  // driver's libraries and tools but no GPU; "all"; or a list of indexes, UUIDs and MIG names.
  enum class Devices { kVoid, kNone, kAll, kList };
  Devices devices = Devices::kVoid;
  std::vector<std::string> list;  // kList: the names as given
  unsigned capabilities = kCapUtility;
  bool capabilities_set = false;  // NVIDIA_DRIVER_CAPABILITIES was given (else the default)
  // NVIDIA_REQUIRE_* as NAME=VALUE, ANDed; empty when NVIDIA_DISABLE_REQUIRE is true.
  std::vector<std::string> requirements;
  std::string devices_from;  // for messages: "the image's Env" or "the job's environment"
};

// Looks NAME up: the job's environment first, then the image's Env (enroot's hook keeps a
// variable the job set and takes the image's otherwise). NAMES lists every variable name both have
// (to find the NVIDIA_REQUIRE_* ones).
struct NvidiaEnvSource {
  std::function<std::optional<std::string>(const std::string&)> job;
  std::function<std::optional<std::string>(const std::string&)> image;
  std::vector<std::string> names;
};

// An unknown capability is an error naming it and the known ones.
Result<NvidiaRequest> parse_nvidia_env(const NvidiaEnvSource& env);

// "compute,utility" to bits; "all" to kCapAll; an empty text to the default (utility).
Result<unsigned> parse_capabilities(const std::string& text);
std::string format_capabilities(unsigned caps);

// The node's driver: its version ("580.65.06") from /proc/driver/nvidia/version, else from the
// file name libcuda.so.1 points to in the host's ld.so cache; and the newest CUDA it runs.
struct DriverInfo {
  std::string version;     // empty: no NVIDIA driver on this node
  std::vector<int> parts;  // {580, 65, 6}
  int cuda_major = 0, cuda_minor = 0;  // 0.0: newer than the table knows (see nvidia_env.cc)
  std::string cuda() const;  // "13.0", or "newer than 13.0"
};
DriverInfo host_driver(const std::string& root, const LdCache& host_cache);

// The NVIDIA_REQUIRE_* constraints against DRIVER: NAME=VALUE's space-separated alternatives are
// ORed, the comma-separated constraints in one alternative ANDed, and the variables ANDed
// (README.md, "Expressions"). cuda and driver are compared; brand and arch need NVML and are
// taken as met. On failure: "image 'IMG' requires NAME=VALUE, but node N's driver is 535.104.05
// (CUDA 12.2); ..." with the fix.
Status check_requirements(const NvidiaRequest& req, const DriverInfo& driver,
                          const std::string& image, const std::string& node);

// Dotted version comparison: "12.4" < "12.10", "535.104.05" > "535.54.03".
int compare_versions(const std::vector<int>& a, const std::vector<int>& b);
std::vector<int> parse_version(const std::string& text);

}  // namespace slipway::launcher
