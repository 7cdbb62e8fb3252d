// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Host library sets, their dependency closure and their binds (see host_libs.h).
#include "dl/host_libs.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <deque>

#include "common/file_util.h"
#include "dl/abi_checks.h"
#include "dl/image_libs.h"

namespace slipway::launcher {
namespace {

// The C library's own family must match the image's ld.so; libstdc++ and libgcc_s are backward
// compatible and versioned, so the image's copy serves the host library if its versions suffice.
constexpr std::string_view kImageProvided[] = {
    "libc.so.6",     "libm.so.6",      "libdl.so.2",     "libpthread.so.0", "librt.so.1",
    "libresolv.so.2", "libutil.so.1",  "libanl.so.1",    "libnsl.so.1",     "libmvec.so.1",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libstdc++.so.6", "libgcc_s.so.1"};

bool is_set_name(std::string_view s) {
  return !s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") == std::string_view::npos;
}

std::string dir_name(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos || slash == 0 ? "/" : p.substr(0, slash);
}

std::string base_name(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// Walks DT_NEEDED breadth-first from the libraries the sets name.
class Closure {
 public:
  Closure(const InjectRequest& req, const LdCache& cache) : req_(req), cache_(cache) {}

  Status add_named(const std::string& set, const std::string& item) {
    std::string host_path = item;
    if (item[0] != '/') {
      const auto* e = cache_.find(item);
      if (!e)
        return Status::error("host library '" + item + "' of set '" + set +
                                 "' is not in the host's ld.so cache; fix host_libs= in "
                                 "plugstack.conf or run ldconfig on the node",
                             ENOENT);
      host_path = e->path;
    }
    return add(set, host_path, "named in host library set '" + set + "'", true);
  }

  Status finish() {
    while (!queue_.empty()) {
      size_t i = queue_.front();
      queue_.pop_front();
      const std::vector<std::string> needed = libs_[i].elf.needed;  // copy: libs_ grows
      const std::string parent = libs_[i].soname, set = libs_[i].set, dir = dir_name(libs_[i].host_file);
      for (const auto& n : needed) {
        if (is_image_provided(n) || seen(n)) continue;
        SLIPWAY_TRY(add(set, locate(n, dir, parent), "needed by " + parent, false));
      }
    }
    return Status();
  }

  std::vector<ResolvedLib>& libs() { return libs_; }

 private:
  bool seen(const std::string& soname) const {
    for (const auto& l : libs_)
      if (l.soname == soname) return true;
    return false;
  }

  // A dependency: beside its parent first (how an $ORIGIN RUNPATH install finds it), else the
  // host's ld.so cache.
  std::string locate(const std::string& soname, const std::string& parent_dir,
                     const std::string& parent) {
    std::string beside = parent_dir + "/" + soname;
    struct stat st;
    if (stat(beside.c_str(), &st) == 0) return beside;
    if (const auto* e = cache_.find(soname)) return in_root(req_.host_root, e->path);
    missing_ = parent + " needs " + soname;
    return "";
  }

  Status add(const std::string& set, const std::string& host_path, const std::string& why,
             bool named) {
    if (host_path.empty())
      return Status::error("cannot inject host library set '" + set + "': " + missing_ +
                               ", which is not in the host's ld.so cache; add it to the set or "
                               "install it on the node",
                           ENOENT);
    const std::string file = host_path.rfind(req_.host_root, 0) == 0 && req_.host_root != "/"
                                 ? host_path
                                 : in_root(req_.host_root, host_path);
    auto elf = read_elf(file, named);
    if (!elf.ok())
      return elf.status().context("host library set '" + set + "' (fix host_libs= in plugstack.conf)");
    ResolvedLib lib{set, elf->soname.empty() ? base_name(host_path) : elf->soname,
                    real_path(file), why, std::move(*elf), named};
    if (seen(lib.soname)) return Status();
    libs_.push_back(std::move(lib));
    queue_.push_back(libs_.size() - 1);
    return Status();
  }

  const InjectRequest& req_;
  const LdCache& cache_;
  std::vector<ResolvedLib> libs_;
  std::deque<size_t> queue_;
  std::string missing_;
};

const HostLibSet* find_set(const std::vector<HostLibSet>& sets, const std::string& name) {
  for (const auto& s : sets)
    if (s.name == name) return &s;
  return nullptr;
}

std::string set_names(const std::vector<HostLibSet>& sets) {
  std::string out;
  for (const auto& s : sets) out += (out.empty() ? "" : ", ") + s.name;
  return out.empty() ? "none" : out;
}

}  // namespace

bool is_image_provided(std::string_view soname) {
  for (auto s : kImageProvided)
    if (s == soname) return true;
  return false;
}

Result<std::vector<HostLibSet>> parse_host_lib_sets(std::string_view text) {
  std::vector<HostLibSet> sets;
  auto bad = [&](const std::string& why) {
    return Status::error("host_libs='" + std::string(text) + "': " + why +
                             "; the syntax is SET:LIB[,LIB...][;SET:...], e.g. "
                             "host_libs=mpi:/usr/lib/x86_64-linux-gnu/libmpi.so.40;nccl:libnccl.so.2",
                         EINVAL);
  };
  size_t i = 0;
  while (i < text.size()) {
    size_t j = std::min(text.find(';', i), text.size());
    std::string_view part = text.substr(i, j - i);
    i = j + 1;
    if (part.empty()) continue;
    size_t colon = part.find(':');
    if (colon == std::string_view::npos) return bad("'" + std::string(part) + "' has no ':'");
    HostLibSet set{std::string(part.substr(0, colon)), {}};
    if (!is_set_name(set.name)) return bad("set name '" + set.name + "' is not a lowercase word");
    if (find_set(sets, set.name)) return bad("set '" + set.name + "' is defined twice");
    std::string_view items = part.substr(colon + 1);
    size_t k = 0;
    while (k <= items.size()) {
      size_t l = std::min(items.find(',', k), items.size());
      std::string item(items.substr(k, l - k));
      k = l + 1;
      if (item.empty()) continue;
      if (item[0] != '/' && item.find('/') != std::string::npos)
        return bad("'" + item + "' is neither an absolute path nor a soname");
      set.items.push_back(item);
    }
    if (set.items.empty()) return bad("set '" + set.name + "' names no library");
    sets.push_back(std::move(set));
  }
  return sets;
}

Result<MpiAbiRule> parse_mpi_abi_rule(std::string_view text) {
  if (text == "major") return MpiAbiRule::kMajor;
  if (text == "full") return MpiAbiRule::kFull;
  if (text == "strict") return MpiAbiRule::kStrict;
  return Status::error("mpi_abi_check='" + std::string(text) + "' is not major, full or strict",
                       EINVAL);
}

Result<InjectionPlan> plan_injection(const std::vector<HostLibSet>& configured,
                                     const InjectRequest& req, const LdCache& host_cache) {
  InjectionPlan plan;
  Closure closure(req, host_cache);
  for (const auto& name : req.sets) {
    const HostLibSet* set = find_set(configured, name);
    if (!set)
      return Status::error("--dl-host-libs=" + name + ": this node has no host library set '" +
                               name + "' (configured: " + set_names(configured) +
                               "); ask your site to add it to host_libs= in plugstack.conf",
                           ENOENT);
    for (const auto& item : set->items) {
      if (item[0] == '/' && is_dir(in_root(req.host_root, item))) {
        plan.binds.push_back({{.source = in_root(req.host_root, item), .destination = item,
                               .read_only = true},
                              "directory of host library set '" + name + "'"});
        continue;
      }
      SLIPWAY_TRY(closure.add_named(name, item));
    }
  }
  SLIPWAY_TRY(closure.finish());
  for (const auto& lib : closure.libs()) {
    plan.libs.push_back({lib.set, lib.soname, lib.host_file, lib.why, lib.named});
    plan.binds.push_back({{.source = lib.host_file,
                           .destination = std::string(kHostLibDir) + "/" + lib.soname,
                           .read_only = true, .recursive = false},
                          "host " + lib.soname + " (" + lib.host_file + "), " + lib.why});
  }
  if (closure.libs().empty()) return plan;
  auto image = ImageLibs::scan(req.image_root);
  SLIPWAY_TRY(image);
  check_injection(closure.libs(), req, *image, plan);
  return plan;
}

}  // namespace slipway::launcher
