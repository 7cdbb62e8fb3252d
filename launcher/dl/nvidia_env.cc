// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// NVIDIA_* variables and the node's driver (see nvidia_env.h).
#include "dl/nvidia_env.h"

#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include "dl/dl_types.h"

namespace slipway::launcher {
namespace {

struct CapabilityName {
  const char* name;
  unsigned bit;
};
constexpr std::array<CapabilityName, 6> kCapabilities = {{{"compute", kCapCompute},
                                                          {"utility", kCapUtility},
                                                          {"video", kCapVideo},
                                                          {"graphics", kCapGraphics},
                                                          {"display", kCapDisplay},
                                                          {"compat32", kCapCompat32}}};

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The CUDA release each driver branch brought: the newest CUDA a driver runs is the last row whose
// minimum driver it meets (CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver
// Versions", Linux x86_64 column). The one place this version-specific knowledge lives; a driver
// newer than the last row runs a CUDA newer than the table knows (DriverInfo's 0.0).
struct CudaRelease {
  int major, minor;
  std::array<int, 3> min_driver;
};
constexpr std::array<CudaRelease, 25> kCudaReleases = {{
    {9, 0, {384, 81, 0}},    {9, 1, {390, 46, 0}},    {9, 2, {396, 26, 0}},
    {10, 0, {410, 48, 0}},   {10, 1, {418, 39, 0}},   {10, 2, {440, 33, 0}},
    {11, 0, {450, 36, 6}},   {11, 1, {455, 23, 0}},   {11, 2, {460, 27, 3}},
    {11, 3, {465, 19, 1}},   {11, 4, {470, 42, 1}},   {11, 5, {495, 29, 5}},
    {11, 6, {510, 39, 1}},   {11, 7, {515, 43, 4}},   {11, 8, {520, 61, 5}},
    {12, 0, {525, 60, 13}},  {12, 1, {530, 30, 2}},   {12, 2, {535, 54, 3}},
    {12, 3, {545, 23, 6}},   {12, 4, {550, 54, 14}},  {12, 5, {555, 42, 2}},
    {12, 6, {560, 28, 3}},   {12, 8, {570, 26, 0}},   {12, 9, {575, 51, 3}},
    {13, 0, {580, 65, 6}},
}};
// The last driver branch the table covers.
constexpr int kLastKnownBranch = 580;

void set_cuda(DriverInfo& d) {
  if (d.parts.empty()) return;
  if (d.parts[0] > kLastKnownBranch) return;  // 0.0: newer than the table
  for (const auto& r : kCudaReleases) {
    std::vector<int> min(r.min_driver.begin(), r.min_driver.end());
    if (compare_versions(d.parts, min) >= 0) d.cuda_major = r.major, d.cuda_minor = r.minor;
  }
}

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..." (or "Open Kernel
// Module"): the token after "Module".
std::string version_from_proc(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("NVRM version:", 0) != 0) continue;
    std::istringstream words(line);
    std::string w, prev;
    while (words >> w) {
      if (prev == "Module" && !parse_version(w).empty()) return w;
      prev = w;
    }
  }
  return "";
}

// The driver version in the name of the file libcuda.so.1 resolves to: libcuda.so.580.65.06.
std::string version_from_libcuda(const std::string& root, const LdCache& cache) {
  const LdCacheEntry* e = cache.find("libcuda.so.1");
  if (!e) return "";
  char real[PATH_MAX];
  if (!realpath(in_root(root, e->path).c_str(), real)) return "";
  std::string name = real;
  name = name.substr(name.rfind('/') + 1);
  const std::string prefix = "libcuda.so.";
  if (name.rfind(prefix, 0) != 0) return "";
  std::string v = name.substr(prefix.size());
  return parse_version(v).size() >= 2 ? v : "";
}

// One constraint, "cuda>=12.4", "driver<536", "brand=tesla", "arch=8.0": met by DRIVER?
Result<bool> constraint_met(const std::string& c, const DriverInfo& driver) {
  const size_t at = c.find_first_of("<>=!");
  const std::string op =
      at == std::string::npos ? "" : c.substr(at, at + 1 < c.size() && c[at + 1] == '=' ? 2 : 1);
  if (at == std::string::npos || at == 0 || op == "!")
    return Status::error("constraint '" + c + "' is not KEY<OP>VERSION", EINVAL);
  const std::string key = c.substr(0, at), value = c.substr(at + op.size());
  std::string k = key;
  std::transform(k.begin(), k.end(), k.begin(), ::tolower);
  if (k == "brand" || k == "arch") return true;  // needs NVML: taken as met (nvidia_env.h)
  std::vector<int> have;
  if (k == "cuda") {
    if (driver.cuda_major == 0) return true;  // newer than the table: meets any CUDA we know
    have = {driver.cuda_major, driver.cuda_minor};
  } else if (k == "driver") {
    have = driver.parts;
  } else {
    return Status::error("constraint '" + c + "' has unknown key '" + key +
                             "' (known: cuda, driver, brand, arch)", EINVAL);
  }
  std::vector<int> want = parse_version(value);
  if (want.empty()) return Status::error("constraint '" + c + "': '" + value + "' is no version", EINVAL);
  // Compare only as many parts as the constraint gives: cuda>=12.4 holds for 12.4.1.
  have.resize(std::max(have.size(), want.size()), 0);
  std::vector<int> h(have.begin(), have.begin() + static_cast<long>(want.size()));
  int cmp = compare_versions(h, want);
  if (op == ">=") return cmp >= 0;
  if (op == "<=") return cmp <= 0;
  if (op == ">") return cmp > 0;
  if (op == "<") return cmp < 0;
  if (op == "!=") return cmp != 0;
  return cmp == 0;
}

}  // namespace

std::vector<int> parse_version(const std::string& text) {
  std::vector<int> out;
  for (const auto& part : split_on(text, '.')) {
    if (part.find_first_not_of("0123456789") != std::string::npos || part.size() > 9) return {};
    out.push_back(std::stoi(part));
  }
  return out;
}

int compare_versions(const std::vector<int>& a, const std::vector<int>& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    int x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

Result<unsigned> parse_capabilities(const std::string& text) {
  if (trim(text).empty()) return static_cast<unsigned>(kCapUtility);
  unsigned caps = 0;
  for (auto name : split_on(text, ',')) {
    name = trim(name);
    if (name == "all") return static_cast<unsigned>(kCapAll);
    auto it = std::find_if(kCapabilities.begin(), kCapabilities.end(),
                           [&](const auto& c) { return name == c.name; });
    if (it == kCapabilities.end())
      return Status::error("NVIDIA_DRIVER_CAPABILITIES='" + text + "' names unknown capability '" +
                               name + "'; use compute, utility, video, graphics, display, compat32 "
                               "or all",
                           EINVAL);
    caps |= it->bit;
  }
  return caps;
}

std::string format_capabilities(unsigned caps) {
  std::string out;
  for (const auto& c : kCapabilities)
    if (caps & c.bit) out += (out.empty() ? "" : ",") + std::string(c.name);
  return out;
}

Result<NvidiaRequest> parse_nvidia_env(const NvidiaEnvSource& env) {
  auto get = [&](const std::string& name, std::string* from = nullptr) -> std::optional<std::string> {
    std::optional<std::string> v;
    const char* where = "";
    if (env.job && (v = env.job(name))) where = "the job's environment";
    else if (env.image && (v = env.image(name))) where = "the image's Env";
    if (from) *from = where;
    return v;
  };
  NvidiaRequest req;
  const auto devices = get("NVIDIA_VISIBLE_DEVICES", &req.devices_from);
  const std::string d = trim(devices.value_or(""));
  if (d.empty() || d == "void") req.devices = NvidiaRequest::Devices::kVoid;
  else if (d == "none") req.devices = NvidiaRequest::Devices::kNone;
  else if (d == "all") req.devices = NvidiaRequest::Devices::kAll;
  else {
    req.devices = NvidiaRequest::Devices::kList;
    for (const auto& t : split_on(d, ',')) req.list.push_back(trim(t));
  }
  const auto caps_text = get("NVIDIA_DRIVER_CAPABILITIES");
  req.capabilities_set = caps_text && !trim(*caps_text).empty();
  auto caps = parse_capabilities(caps_text.value_or(""));
  SLIPWAY_TRY(caps);
  req.capabilities = *caps;
  // NVIDIA_DISABLE_REQUIRE is a boolean switch (README.md, "NVIDIA_DISABLE_REQUIRE"); "0" and
  // "false" leave the requirements on.
  const std::string disable = trim(get("NVIDIA_DISABLE_REQUIRE").value_or(""));
  if (!disable.empty() && disable != "0" && disable != "false" && disable != "False") return req;
  std::vector<std::string> names = env.names;
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const auto& n : names)
    if (n.rfind("NVIDIA_REQUIRE_", 0) == 0)
      if (auto v = get(n); v && !trim(*v).empty()) req.requirements.push_back(n + "=" + trim(*v));
  return req;
}

std::string DriverInfo::cuda() const {
  if (cuda_major == 0) return "newer than 13.0";
  return std::to_string(cuda_major) + "." + std::to_string(cuda_minor);
}

DriverInfo host_driver(const std::string& root, const LdCache& host_cache) {
  DriverInfo d;
  d.version = version_from_proc(in_root(root, "/proc/driver/nvidia/version"));
  if (d.version.empty()) d.version = version_from_libcuda(root, host_cache);
  d.parts = parse_version(d.version);
  set_cuda(d);
  return d;
}

Status check_requirements(const NvidiaRequest& req, const DriverInfo& driver,
                          const std::string& image, const std::string& node) {
  if (req.requirements.empty()) return Status();
  const std::string where = node.empty() ? "this node" : "node " + node;
  for (const auto& r : req.requirements) {
    const std::string expr = r.substr(r.find('=') + 1);
    bool any = false;
    for (const auto& alternative : split_on(expr, ' ')) {
      bool all = true;
      for (const auto& c : split_on(alternative, ',')) {
        auto met = constraint_met(c, driver);
        if (!met.ok())
          return Status::error("image '" + image + "': " + r.substr(0, r.find('=')) + ": " +
                                   met.status().message(), EINVAL);
        all = all && *met;
      }
      any = any || all;
    }
    if (any) continue;
    return Status::error(
        "image '" + image + "' requires " + r + ", but " + where + "'s NVIDIA driver is " +
            (driver.version.empty() ? std::string("unknown") : driver.version) + " (CUDA " +
            (driver.version.empty() ? std::string("unknown") : driver.cuda()) +
            "); use an image built for this driver's CUDA, run on nodes with a newer driver, or "
            "set NVIDIA_DISABLE_REQUIRE=1 if the image carries CUDA forward-compatibility libraries",
        EINVAL);
  }
  return Status();
}

}  // namespace slipway::launcher
