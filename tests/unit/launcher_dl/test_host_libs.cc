// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for host library injection (launcher/dl/host_libs.h, abi_checks.h) and its readers
// (elf.h, ld_cache.h, image_libs.h): set syntax, dependency closure, binds, and every check
// against fake host and image roots assembled from the fixture libraries of this directory.
#include <unistd.h>

#include <algorithm>
#include <string>

#include "dl/elf.h"
#include "dl/host_libs.h"
#include "dl/image_libs.h"
#include "dl/ld_cache.h"
#include "dl_test_util.h"

#include "check_main.h"  // last: check.h defines a fail() macro

using namespace slipway::launcher;

static const char* kHostLibc = "/lib/x86_64-linux-gnu/libc.so.6";

static bool contains(const std::vector<std::string>& v, const std::string& needle) {
  return std::any_of(v.begin(), v.end(),
                     [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

static std::string all(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

// Host root: the fake MPICH libmpi 12.1.5 and its dependency, and the cache naming them.
struct FakeHost {
  std::string root = make_scratch();
  LdCache cache;
  FakeHost() {
    copy_file(FIX_MPICH, root + "/usr/lib/slw/libmpi.so.12.1.5");
    copy_file(FIX_OMPI, root + "/usr/lib/ompi/libmpi.so.40.30.4");
    copy_file(FIX_DEP, root + "/usr/lib/dep/libslwdep.so.1");
    copy_file(FIX_NETPLUGIN, root + "/usr/lib/nccl/libnccl-net.so");
    make_dirs(root + "/etc/mpi");
    cache = LdCache({{"libmpi.so.12", "/usr/lib/slw/libmpi.so.12.1.5"},
                     {"libslwdep.so.1", "/usr/lib/dep/libslwdep.so.1"}});
  }
};

// An image root with libc `libc` and, if given, a libmpi file name (with its soname symlink).
static std::string make_image(const std::string& libc, const std::string& mpi_file = "",
                              const std::string& mpi_fixture = FIX_MPICH) {
  std::string root = make_scratch();
  const std::string lib = root + "/usr/lib/x86_64-linux-gnu/";
  copy_file(libc, lib + "libc.so.6");
  if (!mpi_file.empty()) {
    copy_file(mpi_fixture, lib + mpi_file);
    std::string soname = mpi_file.substr(0, mpi_file.find(".so.") + 4) +
                         std::to_string(so_version(mpi_file)[0]);
    ck_assert_int_eq(symlink(mpi_file.c_str(), (lib + soname).c_str()), 0);
  }
  return root;
}

static InjectionPlan plan(const FakeHost& h, const std::string& sets_text,
                          const std::string& image, std::vector<std::string> names,
                          MpiAbiRule rule = MpiAbiRule::kFull) {
  auto sets = parse_host_lib_sets(sets_text);
  ck_assert_msg(sets.ok(), "%s", sets.status().message().c_str());
  InjectRequest req{names, h.root, image, rule};
  auto p = plan_injection(*sets, req, h.cache);
  ck_assert_msg(p.ok(), "%s", p.status().message().c_str());
  return *p;
}

START_TEST(set_syntax) {
  auto sets = parse_host_lib_sets("mpi:/usr/lib/libmpi.so.40,/etc/openmpi;nccl:libnccl.so.2");
  ck_assert(sets.ok());
  ck_assert_int_eq(static_cast<int>(sets->size()), 2);
  EXPECT_STR((*sets)[0].name, "mpi");
  ck_assert_int_eq(static_cast<int>((*sets)[0].items.size()), 2);
  EXPECT_STR((*sets)[1].items[0], "libnccl.so.2");
  for (const char* bad : {"mpi", "MPI:/x.so", "mpi:", "mpi:a/b.so", "a:/x;a:/y"}) {
    auto s = parse_host_lib_sets(bad);
    ck_assert_msg(!s.ok(), "accepted %s", bad);
    ck_assert(s.status().message().find("host_libs=") == 0);
    ck_assert(s.status().message().find("SET:LIB") != std::string::npos);
  }
  ck_assert(parse_host_lib_sets("")->empty());
  ck_assert(parse_mpi_abi_rule("strict").ok() && !parse_mpi_abi_rule("loose").ok());
}
END_TEST

START_TEST(elf_and_cache_readers) {
  auto cache = LdCache::load("/etc/ld.so.cache");
  ck_assert(cache.ok());
  ck_assert(cache->find("libc.so.6") != nullptr);
  ck_assert(!LdCache::parse("garbage", "x").ok());
  ck_assert(!LdCache::parse("glibc-ld.so.cache1.1", "x").ok());
  auto libc = read_elf(kHostLibc);
  ck_assert(libc.ok());
  ck_assert(std::count(libc->version_defs.begin(), libc->version_defs.end(), "GLIBC_2.34") == 1);
  auto mpi = read_elf(FIX_MPICH, true);
  ck_assert(mpi.ok());
  EXPECT_STR(mpi->soname, "libmpi.so.12");
  ck_assert(contains(mpi->needed, "libslwdep.so.1"));
  ck_assert(contains(mpi->exported, "MPI_Init"));
  bool glibc234 = false;
  for (const auto& n : mpi->version_needs)
    if (n.file == "libc.so.6") glibc234 = contains(n.versions, "GLIBC_2.34");
  ck_assert(glibc234);
  ck_assert(!read_elf("/etc/hostname").ok());
  ck_assert(so_version("libmpi.so.12.1.5") == std::vector<int>({12, 1, 5}));
}
END_TEST

START_TEST(closure_and_binds) {
  FakeHost h;
  auto p = plan(h, "mpi:libmpi.so.12,/etc/mpi", make_image(kHostLibc, "libmpi.so.12.1.5"), {"mpi"});
  ck_assert_msg(p.errors.empty(), "%s", all(p.errors).c_str());
  ck_assert_int_eq(static_cast<int>(p.libs.size()), 2);
  EXPECT_STR(p.libs[1].soname, "libslwdep.so.1");
  ck_assert(p.libs[1].why.find("needed by libmpi.so.12") != std::string::npos);
  bool mpi = false, dep = false, dir = false;
  for (const auto& b : p.binds) {
    ck_assert(b.bind.read_only);
    mpi |= b.bind.destination == "/opt/slipway/hostlibs/libmpi.so.12" &&
           b.bind.source == h.root + "/usr/lib/slw/libmpi.so.12.1.5";
    dep |= b.bind.destination == "/opt/slipway/hostlibs/libslwdep.so.1";
    dir |= b.bind.destination == "/etc/mpi" && b.bind.source == h.root + "/etc/mpi";
  }
  ck_assert(mpi && dep && dir);
  ck_assert_msg(contains(p.checks, "libc.so.6: host libraries need up to GLIBC_2.34"), "%s",
                all(p.checks).c_str());
}
END_TEST

START_TEST(unknown_sets_and_libraries_are_errors) {
  FakeHost h;
  auto sets = parse_host_lib_sets("mpi:libmpi.so.12;pmix:libpmix.so.2");
  InjectRequest req{{"nccl"}, h.root, make_image(kHostLibc), MpiAbiRule::kFull};
  auto p = plan_injection(*sets, req, h.cache);
  ck_assert(!p.ok());
  EXPECT_STR(p.status().message(), "--dl-host-libs=nccl: this node has no host library set 'nccl' (configured: "
                   "mpi, pmix); ask your site to add it to host_libs= in plugstack.conf");
  req.sets = {"pmix"};
  p = plan_injection(*sets, req, h.cache);
  ck_assert(!p.ok());
  ck_assert(p.status().message().find("'libpmix.so.2' of set 'pmix' is not in the host's ld.so "
                                      "cache") != std::string::npos);
}
END_TEST

START_TEST(other_soname_major_fails_with_both_versions) {
  FakeHost h;
  auto p = plan(h, "mpi:/usr/lib/ompi/libmpi.so.40.30.4", make_image(kHostLibc, "libmpi.so.12.1.5"),
                {"mpi"});
  ck_assert_int_eq(static_cast<int>(p.errors.size()), 1);
  EXPECT_STR(p.errors[0], "host libmpi.so.40 (libmpi.so.40.30.4, set 'mpi') cannot replace the image's "
                   "libmpi.so.12: the soname majors differ (40 vs 12); use an image built against "
                   "libmpi.so.40, or run without --dl-host-libs=mpi");
  p = plan(h, "mpi:/usr/lib/ompi/libmpi.so.40.30.4", make_image(kHostLibc), {"mpi"});
  ck_assert(p.errors.empty());
  ck_assert(contains(p.checks, "the image has no libmpi.so.*"));
}
END_TEST

START_TEST(mpich_abi_rules) {
  FakeHost h;  // host: libmpi.so.12.1.5
  struct {
    const char* image;
    MpiAbiRule rule;
    int errors, warnings;
  } cases[] = {{"libmpi.so.12.1.0", MpiAbiRule::kStrict, 0, 0},
               {"libmpi.so.12.3.0", MpiAbiRule::kStrict, 1, 0},
               {"libmpi.so.12.3.0", MpiAbiRule::kFull, 0, 1},
               {"libmpi.so.12.0.9", MpiAbiRule::kFull, 0, 0},
               {"libmpi.so.12.3.0", MpiAbiRule::kMajor, 0, 0}};
  for (const auto& c : cases) {
    auto p = plan(h, "mpi:libmpi.so.12", make_image(kHostLibc, c.image), {"mpi"}, c.rule);
    ck_assert_msg(static_cast<int>(p.errors.size()) == c.errors &&
                      static_cast<int>(p.warnings.size()) == c.warnings,
                  "%s: errors %s warnings %s", c.image, all(p.errors).c_str(), all(p.warnings).c_str());
  }
  auto p = plan(h, "mpi:libmpi.so.12", make_image(kHostLibc, "libmpi.so.12.3.0"), {"mpi"},
                MpiAbiRule::kStrict);
  EXPECT_STR(p.errors[0],
                   "MPICH ABI (strict): host libmpi.so.12.1.5 (12.1.5), image libmpi.so.12.3.0 "
                   "(12.3.0) differ in minor version; use an image built against libmpi.so.12.1, "
                   "or ask your site for mpi_abi_check=full");
}
END_TEST

START_TEST(glibc_too_old_in_the_image) {
  FakeHost h;
  auto p = plan(h, "mpi:libmpi.so.12", make_image(FIX_OLDLIBC, "libmpi.so.12.1.5"), {"mpi"});
  ck_assert_msg(contains(p.errors, "host libmpi.so.12 needs GLIBC_2.34 from libc.so.6, but the "
                                   "image's libc.so.6 has only up to GLIBC_2.17; use an image "
                                   "with a newer libc.so.6"),
                "%s", all(p.errors).c_str());
}
END_TEST

START_TEST(nccl_net_plugin_api_must_be_accepted) {
  FakeHost h;
  std::string image = make_image(kHostLibc);
  copy_file(FIX_OLDNCCL, image + "/usr/lib/x86_64-linux-gnu/libnccl.so.2");
  auto p = plan(h, "nccl:/usr/lib/nccl/libnccl-net.so", image, {"nccl"});
  ck_assert_int_eq(static_cast<int>(p.errors.size()), 1);
  EXPECT_STR(p.errors[0],
                   "host NCCL net plugin libnccl-net.so (set 'nccl') implements net API v9, but "
                   "the image's NCCL 2.18.1+cuda12.2 loads only v6, v7; use a plugin built for one "
                   "of those, or inject the host's NCCL too (libnccl.so.2 in the set)");
  p = plan(h, "nccl:/usr/lib/nccl/libnccl-net.so", make_image(kHostLibc), {"nccl"});
  ck_assert(p.errors.empty() && contains(p.warnings, "neither the image nor"));
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("dl_host_libs");
  TCase* tc = tcase_create("host_libs");
  tcase_add_test(tc, set_syntax);
  tcase_add_test(tc, elf_and_cache_readers);
  tcase_add_test(tc, closure_and_binds);
  tcase_add_test(tc, unknown_sets_and_libraries_are_errors);
  tcase_add_test(tc, other_soname_major_fails_with_both_versions);
  tcase_add_test(tc, mpich_abi_rules);
  tcase_add_test(tc, glibc_too_old_in_the_image);
  tcase_add_test(tc, nccl_net_plugin_api_must_be_accepted);
  suite_add_tcase(s, tc);
  return s;
}
