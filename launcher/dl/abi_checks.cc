// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Compatibility checks of injected host libraries against the image (see abi_checks.h). Each
// failure is one line naming both sides' versions and the way out.
#include "dl/abi_checks.h"

#include <fcntl.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

namespace slipway::launcher {
namespace {

// Libraries of the MPICH ABI Compatibility Initiative (MPICH, Intel MPI, Cray MPT, MVAPICH).
constexpr std::string_view kMpichAbi[] = {"libmpi.so.12", "libmpich.so.12", "libmpicxx.so.12",
                                          "libmpifort.so.12", "libmpichcxx.so.12",
                                          "libmpichf90.so.12"};

std::string base_name(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string dotted(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ".") + std::to_string(x);
  return out.empty() ? "?" : out;
}

// "GLIBC_2.34" -> ("GLIBC_", {2, 34}); "GCC_3.0" -> ("GCC_", {3, 0}).
std::pair<std::string, std::vector<int>> split_version(const std::string& v) {
  size_t us = v.rfind('_');
  if (us == std::string::npos) return {v, {}};
  std::vector<int> nums;
  std::string_view rest = std::string_view(v).substr(us + 1);
  while (!rest.empty()) {
    int n = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
    if (ec != std::errc()) return {v, {}};
    nums.push_back(n);
    rest.remove_prefix(static_cast<size_t>(end - rest.data()));
    if (!rest.empty()) rest.remove_prefix(1);
  }
  return {v.substr(0, us + 1), nums};
}

// The newest version in `defs` of the family of `like` (GLIBC_, GLIBCXX_, CXXABI_, GCC_...).
std::string newest_like(const std::vector<std::string>& defs, const std::string& like) {
  auto family = split_version(like).first;
  std::string best;
  std::vector<int> best_nums;
  for (const auto& d : defs) {
    auto [fam, nums] = split_version(d);
    if (fam == family && nums > best_nums) best = d, best_nums = nums;
  }
  return best.empty() ? "no " + family + "* version at all" : best;
}

std::vector<int> plugin_versions(const std::vector<std::string>& names) {
  std::set<int> out;
  const std::string_view prefix = "ncclNetPlugin_v";
  for (const auto& n : names) {
    if (n.rfind(prefix, 0) != 0) continue;
    int v = 0;
    std::string_view rest = std::string_view(n).substr(prefix.size());
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (ec == std::errc() && end == rest.data() + rest.size()) out.insert(v);
  }
  return {out.begin(), out.end()};
}

std::string vlist(const std::vector<int>& v) {
  std::vector<std::string> s;
  for (int x : v) s.push_back("v" + std::to_string(x));
  return s.empty() ? "none" : join(s);
}

class Checker {
 public:
  Checker(const InjectRequest& req, const ImageLibs& image, InjectionPlan& plan)
      : req_(req), image_(image), plan_(plan) {}

  void soname(const ResolvedLib& lib) {
    const size_t at = lib.soname.find(".so.");
    if (at == std::string::npos) return;
    const std::string stem = lib.soname.substr(0, at + 4);
    std::set<int> majors;
    for (const auto* l : image_.with_prefix(stem))
      if (auto v = so_version(l->name); !v.empty()) majors.insert(v[0]);
    const std::string host_file = base_name(lib.host_file);
    if (majors.empty()) {
      plan_.checks.push_back(lib.soname + ": the image has no " + stem + "*, the host's is added");
      return;
    }
    const ImageLib* same = image_.find(lib.soname);
    if (!same) {
      std::vector<std::string> theirs, numbers;
      for (int m : majors) theirs.push_back(stem + std::to_string(m)), numbers.push_back(std::to_string(m));
      plan_.errors.push_back(
          "host " + lib.soname + " (" + host_file + ", set '" + lib.set + "') cannot replace the " +
          "image's " + join(theirs) + ": the soname majors differ (" +
          std::to_string(so_version(lib.soname)[0]) + " vs " + join(numbers, "/") +
          "); use an image built against " + lib.soname + ", or run without --dl-host-libs=" + lib.set);
      return;
    }
    plan_.checks.push_back(lib.soname + ": host " + host_file + " replaces the image's " +
                           (same->real_name.empty() ? same->name : same->real_name));
    if (std::find(std::begin(kMpichAbi), std::end(kMpichAbi), lib.soname) != std::end(kMpichAbi))
      mpich_abi(lib, host_file, same->real_name.empty() ? same->name : same->real_name);
  }

  void versions(const ResolvedLib& lib, const std::set<std::string>& injected) {
    for (const auto& need : lib.elf.version_needs) {
      if (injected.count(need.file)) continue;
      const std::vector<std::string>* defs = image_defs(need.file);
      if (!defs) {
        plan_.errors.push_back("host " + lib.soname + " needs " + need.file + " (" +
                               join(need.versions) + "), which the image does not have; " +
                               "use an image that has it, or add it to host library set '" +
                               lib.set + "'");
        continue;
      }
      for (const auto& v : need.versions) {
        if (std::find(defs->begin(), defs->end(), v) != defs->end()) {
          note_need(need.file, v);
          continue;
        }
        plan_.errors.push_back("host " + lib.soname + " needs " + v + " from " + need.file +
                               ", but the image's " + need.file + " has only up to " +
                               newest_like(*defs, v) + "; use an image with a newer " +
                               need.file + ", or host libraries built for an older one");
      }
    }
  }

  void summarize_versions() {
    for (const auto& [key, newest] : needed_) {
      const auto* defs = image_defs(key.first);
      plan_.checks.push_back(key.first + ": host libraries need up to " + newest.first +
                             ", the image's has up to " + newest_like(*defs, newest.first));
    }
  }

  void nccl_plugins(const std::vector<ResolvedLib>& libs) {
    for (const auto& lib : libs) {
      if (!lib.named) continue;
      auto offered = plugin_versions(lib.elf.exported);
      if (offered.empty()) continue;
      std::string where;
      auto accepted = nccl_accepts(libs, where);
      if (where.empty()) {
        plan_.warnings.push_back("host NCCL net plugin " + lib.soname + " is injected, but "
                                 "neither the image nor the host library sets have libnccl");
        continue;
      }
      std::vector<int> common;
      std::set_intersection(offered.begin(), offered.end(), accepted.begin(), accepted.end(),
                            std::back_inserter(common));
      if (common.empty())
        plan_.errors.push_back("host NCCL net plugin " + lib.soname + " (set '" + lib.set +
                               "') implements net API " + vlist(offered) + ", but " + where +
                               " loads only " + vlist(accepted) +
                               "; use a plugin built for one of those, or inject the host's NCCL "
                               "too (libnccl.so.2 in the set)");
      else
        plan_.checks.push_back("NCCL net plugin " + lib.soname + ": API v" +
                               std::to_string(common.back()) + " accepted by " + where);
    }
  }

 private:
  void mpich_abi(const ResolvedLib& lib, const std::string& host_file, const std::string& image_file) {
    auto h = so_version(host_file), c = so_version(image_file);
    h.resize(std::max<size_t>(h.size(), 2), 0);
    c.resize(std::max<size_t>(c.size(), 2), 0);
    const std::string both = "host " + host_file + " (" + dotted(h) + "), image " + image_file +
                             " (" + dotted(c) + ")";
    if (req_.mpi_abi == MpiAbiRule::kStrict && h[1] != c[1])
      plan_.errors.push_back("MPICH ABI (strict): " + both + " differ in minor version; use an " +
                             "image built against " + lib.soname + "." + std::to_string(h[1]) +
                             ", or ask your site for mpi_abi_check=full");
    else if (req_.mpi_abi == MpiAbiRule::kFull && h[1] < c[1])
      plan_.warnings.push_back("MPICH ABI (full): " + both + ": the host's minor version is "
                               "older than the image's; programs that use newer MPI calls fail");
    else
      plan_.checks.push_back("MPICH ABI: " + both + " compatible");
  }

  const std::vector<std::string>* image_defs(const std::string& file) {
    auto it = defs_.find(file);
    if (it != defs_.end()) return it->second.ok ? &it->second.defs : nullptr;
    Defs d;
    if (const ImageLib* l = image_.find(file)) {
      if (auto fd = image_.open(l->path); fd.ok())
        if (auto elf = read_elf_fd(fd->get(), file + " in the image"); elf.ok())
          d = {true, elf->version_defs};
    }
    return defs_.emplace(file, d).first->second.ok ? &defs_[file].defs : nullptr;
  }

  void note_need(const std::string& file, const std::string& v) {
    auto [family, nums] = split_version(v);
    auto& best = needed_[{file, family}];
    if (nums > best.second) best = {v, nums};
  }

  // The net API versions the NCCL that will load the plugin asks for ("ncclNetPlugin_vN" names
  // in its string table), and which NCCL that is ("the host's NCCL 2.28.9" / "the image's ...").
  std::vector<int> nccl_accepts(const std::vector<ResolvedLib>& libs, std::string& where) {
    UniqueFd fd;
    for (const auto& l : libs)
      if (l.soname.rfind("libnccl.so.", 0) == 0) {
        fd.reset(::open(l.host_file.c_str(), O_RDONLY | O_CLOEXEC));
        where = "the host's NCCL";
      }
    if (where.empty())
      for (const auto* l : image_.with_prefix("libnccl.so.")) {
        if (auto f = image_.open(l->path); f.ok()) {
          fd = std::move(*f);
          where = "the image's NCCL";
          break;
        }
      }
    if (!fd.valid()) return {};
    auto version = find_tokens(fd.get(), where, "NCCL version ");
    if (version.ok())
      for (const auto& v : *version)
        if (v.size() > 13 && isdigit(static_cast<unsigned char>(v[13]))) {
          where += " " + v.substr(13);
          break;
        }
    auto names = find_tokens(fd.get(), where, "ncclNetPlugin_v");
    return names.ok() ? plugin_versions(*names) : std::vector<int>{};
  }

  struct Defs {
    bool ok = false;
    std::vector<std::string> defs;
  };
  const InjectRequest& req_;
  const ImageLibs& image_;
  InjectionPlan& plan_;
  std::map<std::string, Defs> defs_;
  // (file, version family) -> the newest version some host library needs from it.
  std::map<std::pair<std::string, std::string>, std::pair<std::string, std::vector<int>>> needed_;
};

}  // namespace

void check_injection(const std::vector<ResolvedLib>& libs, const InjectRequest& req,
                     const ImageLibs& image, InjectionPlan& plan) {
  Checker c(req, image, plan);
  std::set<std::string> injected;
  for (const auto& l : libs) injected.insert(l.soname);
  for (const auto& l : libs)
    if (l.named) c.soname(l);
  for (const auto& l : libs) c.versions(l, injected);
  c.summarize_versions();
  c.nccl_plugins(libs);
}

}  // namespace slipway::launcher
