// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Fabric device patterns, the node's devices they select, and doctor's report of them (see
// fabric.h). Device nodes are bound, never created: a bind keeps the host's inode, hence its
// owner and mode, so a device the user cannot open on the node stays closed in the container
// (docs/security.md, "Fabric devices").
#include "dl/fabric.h"

#include <dirent.h>
#include <fnmatch.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "common/text.h"
#include "dl/doctor.h"

namespace slipway::launcher {
namespace {

constexpr std::string_view kPatternHelp =
    "write /dev/NAME or /dev/DIR/NAME with * ? [...] in NAME only, e.g. /dev/infiniband/umad*";

bool has_glob(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

// Why PATTERN is not one we take, or "" when it is.
std::string pattern_problem(std::string_view p) {
  if (!p.starts_with("/dev/")) return "is not an absolute path under /dev";
  if (p.find_first_of("\\ \t\n") != std::string_view::npos)
    return "contains a backslash or a space";
  const size_t slash = p.rfind('/');
  const std::string_view dir = p.substr(0, slash), name = p.substr(slash + 1);
  if (name.empty()) return "names a directory, not devices";
  if (has_glob(dir)) return "has a glob character in a directory";
  for (auto part : split(p.substr(1), '/'))
    if (part.empty() || part == "." || part == "..") return "has an empty, '.' or '..' component";
  for (size_t open = name.find('['); open != std::string_view::npos;
       open = name.find('[', open + 1))
    if (name.find(']', open + 2) == std::string_view::npos) return "has a '[' without its ']'";
  return "";
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..")
        out.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The character devices under ROOT that PATTERNS match, as paths on the node. Each directory is
// read once, and a name is matched only when it starts with its pattern's literal part: /dev
// holds hundreds of entries, and every launch looks (bench/launch).
std::set<std::string> scan(const std::string& root, const std::vector<std::string>& patterns) {
  struct Pattern {
    std::string whole;
    std::string literal;  // its last component up to the first glob character
  };
  std::map<std::string, std::vector<Pattern>> by_dir;
  for (const auto& p : patterns) {
    const size_t slash = p.rfind('/');
    const size_t glob = std::min(p.find_first_of("*?[", slash), p.size());
    by_dir[p.substr(0, slash)].push_back({p, p.substr(slash + 1, glob - slash - 1)});
  }
  std::set<std::string> out;
  for (const auto& [dir, in_dir] : by_dir) {
    DIR* d = opendir(in_root(root, dir).c_str());
    if (!d) continue;
    while (const dirent* e = readdir(d)) {
      const std::string_view name = e->d_name;
      for (const auto& p : in_dir) {
        if (!name.starts_with(p.literal)) continue;
        const std::string path = dir + "/" + std::string(name);
        if (!fabric_pattern_matches(p.whole, path)) continue;
        // d_type spares an lstat for a device node. A plain file may have a device bound over
        // it (a /dev built that way, as ours in a container is) and d_type is the file's: ask.
        struct stat st;
        const bool maybe = e->d_type == DT_REG || e->d_type == DT_UNKNOWN;
        if (e->d_type == DT_CHR ||
            (maybe && lstat(in_root(root, path).c_str(), &st) == 0 && S_ISCHR(st.st_mode)))
          out.insert(path);
        break;
      }
    }
    closedir(d);
  }
  return out;
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

FabricPolicy default_fabric_policy() {
  FabricPolicy p;
  p.include.assign(std::begin(kDefaultFabricPatterns), std::end(kDefaultFabricPatterns));
  return p;
}

Result<FabricPolicy> parse_fabric_policy(std::string_view value, std::string_view key) {
  const std::string k(key);
  if (value.empty())
    return Status::error(k + " is empty; give 'none' to bind no fabric device, or 'default'",
                         EINVAL);
  FabricPolicy p;
  for (auto item : split(value, ',')) {
    if (item.empty())
      return Status::error(
          k + ": empty item in '" + std::string(value) + "'; separate the items with one comma",
          EINVAL);
    if (item == "default") {
      p.include.insert(p.include.end(), std::begin(kDefaultFabricPatterns),
                       std::end(kDefaultFabricPatterns));
      continue;
    }
    if (item == "mad") {
      p.include.insert(p.include.end(), std::begin(kMadFabricPatterns),
                       std::end(kMadFabricPatterns));
      continue;
    }
    if (item == "none") {
      p.include.clear();
      continue;
    }
    const bool exclude = item.starts_with('-');
    const std::string_view pattern = exclude ? item.substr(1) : item;
    if (!pattern.starts_with('/'))
      return Status::error(k + ": '" + std::string(item) +
                               "' is neither default, mad, none nor a " + "device pattern; " +
                               std::string(kPatternHelp),
                           EINVAL);
    if (auto why = pattern_problem(pattern); !why.empty())
      return Status::error(
          k + ": pattern '" + std::string(pattern) + "' " + why + "; " + std::string(kPatternHelp),
          EINVAL);
    (exclude ? p.exclude : p.include).emplace_back(pattern);
  }
  return p;
}

bool fabric_pattern_matches(const std::string& pattern, const std::string& path) {
  return fnmatch(pattern.c_str(), path.c_str(), FNM_PATHNAME) == 0;
}

bool is_fabric_device_allowed(const FabricPolicy& policy, const std::string& path) {
  auto matches = [&](const std::string& p) { return fabric_pattern_matches(p, path); };
  return std::any_of(policy.include.begin(), policy.include.end(), matches) &&
         std::none_of(policy.exclude.begin(), policy.exclude.end(), matches);
}

FabricPlan plan_fabric(const std::string& root, const FabricPolicy& policy) {
  FabricPlan plan;
  for (const auto& path : scan(root, policy.include)) {
    if (!is_fabric_device_allowed(policy, path)) continue;
    plan.devices.push_back(path);
    // Read-write (verbs write commands to it), nosuid; a node that went away since is skipped.
    plan.binds.push_back({.bind = {.source = in_root(root, path),
                                   .destination = path,
                                   .recursive = false,
                                   .optional = true,
                                   .allow_devices = true},
                          .why = "the node's fabric device (fabric_devices)"});
  }
  return plan;
}

std::vector<std::string> fabric_devices_left_out(const std::string& root,
                                                 const FabricPolicy& policy) {
  std::vector<std::string> usual(std::begin(kDefaultFabricPatterns),
                                 std::end(kDefaultFabricPatterns));
  usual.insert(usual.end(), std::begin(kMadFabricPatterns), std::end(kMadFabricPatterns));
  std::vector<std::string> out;
  for (const auto& path : scan(root, usual))
    if (!is_fabric_device_allowed(policy, path)) out.push_back(path);
  return out;
}

std::string fabric_ib_device(const std::string& root, const std::string& device) {
  const std::string name = device.substr(device.rfind('/') + 1);
  const char* cls = name.starts_with("uverbs")                             ? "infiniband_verbs"
                    : name.starts_with("umad") || name.starts_with("issm") ? "infiniband_mad"
                                                                           : nullptr;
  if (!cls || !device.starts_with("/dev/infiniband/")) return "";
  return read_line(in_root(root, std::string("/sys/class/") + cls + "/" + name + "/ibdev"));
}

// `slipway doctor`'s fabric line: what is bound, what is left out, the HCAs sysfs shows, and
// whether the memory-lock limit lets verbs pin buffers (ibv_reg_mr(3) counts against it).
Finding check_fabric(const std::string& root, const FabricPolicy& policy) {
  const FabricPlan plan = plan_fabric(root, policy);
  const std::vector<std::string> left_out = fabric_devices_left_out(root, policy);
  if (plan.devices.empty() && left_out.empty())
    return {"fabric", Verdict::kSkip,
            "no RDMA or fabric devices (" +
                join({std::begin(kDefaultFabricPatterns), std::end(kDefaultFabricPatterns)}) + ")",
            ""};
  std::vector<std::string> bound;
  for (const auto& d : plan.devices) {
    const std::string ib = fabric_ib_device(root, d);
    bound.push_back(d + (ib.empty() ? "" : " (" + ib + ")"));
  }
  std::string detail = plan.devices.empty()
                           ? "no fabric device bound into containers"
                           : std::to_string(plan.devices.size()) +
                                 " fabric device(s) bound into containers: " + join(bound);
  if (!left_out.empty()) detail += "; left out by fabric_devices: " + join(left_out);
  if (auto hcas = list_dir(in_root(root, "/sys/class/infiniband")); !hcas.empty())
    detail += "; /sys/class/infiniband: " + join(hcas);
  if (plan.devices.empty()) return {"fabric", Verdict::kOk, detail, ""};
  struct rlimit lim = {};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  if (lim.rlim_cur == RLIM_INFINITY)
    return {"fabric", Verdict::kOk, detail + "; RLIMIT_MEMLOCK unlimited", ""};
  return {"fabric", Verdict::kWarn,
          detail + "; RLIMIT_MEMLOCK is " + human_bytes(lim.rlim_cur) +
              ", which limits the memory RDMA may register",
          "'* - memlock unlimited' in /etc/security/limits.conf and LimitMEMLOCK=infinity for "
          "slurmd (srun passes its limits on: PropagateResourceLimits)"};
}

}  // namespace slipway::launcher
