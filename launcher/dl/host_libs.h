// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Host library injection: site-configured sets of host libraries (an MPI, NCCL and its net plugin,
// libpmix, fabric libraries) bound read-only into the container with their dependency closure, and
// put ahead of the image's copies. Before anything is bound, checks say whether the image can use
// them (abi_checks.h).
//
// Where they go and why LD_LIBRARY_PATH: every library is bound as kHostLibDir/SONAME, and the task
// gets LD_LIBRARY_PATH=kHostLibDir:... . ld.so searches LD_LIBRARY_PATH before its cache
// (ld.so(8), "search order"), so the host's copy wins for every program of the image, without
// running the image's ldconfig at launch (code from the image, run before the task) and without
// writing a binary ld.so.cache ourselves; an /etc/ld.so.conf.d file alone would do nothing, as the
// loader reads only the cache. The cost: a program that resets LD_LIBRARY_PATH, or an executable
// with a DT_RPATH to its own copy, escapes the injection; --dl-explain says what was set.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "dl/dl_types.h"
#include "dl/ld_cache.h"

namespace slipway::launcher {

inline constexpr const char* kHostLibDir = "/opt/slipway/hostlibs";

// One site-configured set: plugstack.conf `host_libs=mpi:/usr/lib/x86_64-linux-gnu/libmpi.so.40`.
struct HostLibSet {
  std::string name;
  // Absolute paths of libraries, sonames looked up in the host's ld.so cache (libnccl.so.2), or
  // absolute paths of directories, bound read-only at the same path (MPI component directories,
  // configuration).
  std::vector<std::string> items;
};

// "SET:ITEM[,ITEM...][;SET:ITEM...]". Set names are lowercase words (as --dl-host-libs takes).
Result<std::vector<HostLibSet>> parse_host_lib_sets(std::string_view text);

// Sarus's rules for MPICH-ABI libraries (libmpi.so.12 and friends), on the versions in the real
// file names: major = same major; full = same major and the host's minor >= the image's (older
// host minor: a warning); strict = same major and minor.
enum class MpiAbiRule { kMajor, kFull, kStrict };
Result<MpiAbiRule> parse_mpi_abi_rule(std::string_view text);

struct InjectRequest {
  std::vector<std::string> sets;  // the set names asked for
  std::string host_root = "/";    // the host's root (a fake tree in tests)
  std::string image_root;         // the unpacked image
  MpiAbiRule mpi_abi = MpiAbiRule::kFull;
};

struct InjectedLib {
  std::string set, soname, host_path, why;
  bool named = false;  // named in the set; the others come as its dependencies
};

struct InjectionPlan {
  std::vector<InjectedLib> libs;
  std::vector<PlannedBind> binds;
  std::vector<std::string> checks;    // checks passed, with what they compared
  std::vector<std::string> warnings;  // checks that only warn (e.g. an older MPICH minor)
  std::vector<std::string> errors;    // failed checks: one line each, both sides and the fix
  bool empty() const { return binds.empty(); }
};

// Resolves the sets asked for (a set the site does not have, or a library the host lacks, is an
// error), their dependency closure through the host's ld.so cache (glibc, libstdc++ and libgcc_s
// always come from the image: the image's loader and C library must stay one piece), and runs
// the checks against the image, recording their failures in the plan.
Result<InjectionPlan> plan_injection(const std::vector<HostLibSet>& configured,
                                     const InjectRequest& req, const LdCache& host_cache);

// True for the libraries that always come from the image (glibc's family, libstdc++, libgcc_s).
bool is_image_provided(std::string_view soname);

}  // namespace slipway::launcher
