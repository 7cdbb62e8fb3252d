// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for launcher/dl/fabric.h: fabric_devices= lists (keywords, order, exclusions, every
// malformed pattern refused in one line), glob matching, and the plan against a fake node whose
// device nodes are /dev/null bound over plain files inside a user + mount namespace of the test
// (no root needed: Check forks each test), with a directory, a file and a symlink that match a
// pattern but are not character devices; doctor's fabric line, RLIMIT_MEMLOCK included.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dl/doctor.h"
#include "dl/fabric.h"
#include "dl_test_util.h"

#include "check_main.h"  // last: check.h defines a fail() macro

using namespace slipway::launcher;
using Paths = std::vector<std::string>;

static FabricPolicy parsed(const char* value) {
  auto p = parse_fabric_policy(value, "fabric_devices");
  ck_assert_msg(p.ok(), "%s: %s", value, p.status().message().c_str());
  return *p;
}

static std::string refusal(const char* value) {
  auto p = parse_fabric_policy(value, "fabric_devices");
  ck_assert_msg(!p.ok(), "'%s' was taken", value);
  const std::string m = p.status().message();
  ck_assert_msg(m.find('\n') == std::string::npos, "not one line: %s", m.c_str());
  ck_assert_msg(m.rfind("fabric_devices", 0) == 0, "does not name the key: %s", m.c_str());
  return m;
}

static void put(const char* path, const std::string& v) {
  int fd = open(path, O_WRONLY);
  ck_assert_msg(fd >= 0 && write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size()), "%s",
                path);
  close(fd);
}

// Device nodes of a fabric node under a scratch root: InfiniBand verbs, CM and MAD devices,
// Slingshot and Omni-Path, each /dev/null bound over a plain file; and what a pattern matches
// that is no device: a directory, a file, a symlink to a device. Also the sysfs names of the
// verbs and MAD devices. The caller has been moved into a user + mount namespace of its own.
static std::string make_fabric_node() {
  // A tmpfs of the namespace's own as the root, detached at exit (before the scratch directory
  // is removed: atexit(3) runs in reverse order), so no mount point is left in /tmp.
  static std::string root;
  root = make_scratch();
  ck_assert_int_eq(mount("fabric-test", root.c_str(), "tmpfs", 0, "mode=0755"), 0);
  atexit([] { umount2(root.c_str(), MNT_DETACH); });
  const Paths devices = {"/dev/infiniband/uverbs0",
                         "/dev/infiniband/uverbs1",
                         "/dev/infiniband/rdma_cm",
                         "/dev/infiniband/umad0",
                         "/dev/infiniband/issm0",
                         "/dev/cxi0",
                         "/dev/hfi1_0"};
  for (const auto& d : devices) {
    write_file(root + d, "");
    ck_assert_msg(mount("/dev/null", (root + d).c_str(), nullptr, MS_BIND, nullptr) == 0, "%s",
                  d.c_str());
  }
  make_dirs(root + "/dev/infiniband/uverbs-by-path");
  write_file(root + "/dev/cxi_notes", "not a device\n");
  ck_assert(symlink("/dev/null", (root + "/dev/hfi1_link").c_str()) == 0);
  write_file(root + "/sys/class/infiniband_verbs/uverbs0/ibdev", "mlx5_0\n");
  write_file(root + "/sys/class/infiniband_verbs/uverbs1/ibdev", "mlx5_1\n");
  write_file(root + "/sys/class/infiniband_mad/umad0/ibdev", "mlx5_0\n");
  make_dirs(root + "/sys/class/infiniband/mlx5_0");
  make_dirs(root + "/sys/class/infiniband/mlx5_1");
  return root;
}

static void enter_user_and_mount_namespace() {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  ck_assert_int_eq(unshare(CLONE_NEWUSER | CLONE_NEWNS), 0);
  put("/proc/self/setgroups", "deny");
  put("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1");
  put("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
  ck_assert_int_eq(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
}

START_TEST(default_policy_is_verbs_cm_slingshot_omnipath) {
  const FabricPolicy d = default_fabric_policy();
  ck_assert(d.include == Paths({"/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm", "/dev/cxi*",
                                "/dev/hfi1_*"}));
  ck_assert(d.exclude.empty());
  ck_assert(parsed("default").include == d.include);
  for (const char* mad : {"/dev/infiniband/umad0", "/dev/infiniband/issm1"})
    ck_assert_msg(!is_fabric_device_allowed(d, mad), "%s is allowed by default", mad);
}
END_TEST

START_TEST(lists_add_restrict_and_replace) {
  FabricPolicy p = parsed("default,mad");
  for (const char* dev : {"/dev/infiniband/umad0", "/dev/infiniband/issm0",
                          "/dev/infiniband/uverbs3", "/dev/cxi1", "/dev/hfi1_0"})
    ck_assert_msg(is_fabric_device_allowed(p, dev), "%s", dev);
  // A list without default replaces it.
  p = parsed("/dev/infiniband/uverbs*,/dev/infiniband/rdma_cm");
  ck_assert(is_fabric_device_allowed(p, "/dev/infiniband/uverbs0"));
  ck_assert(!is_fabric_device_allowed(p, "/dev/cxi0"));
  ck_assert(!is_fabric_device_allowed(p, "/dev/hfi1_0"));
  // Exclusions win wherever they stand.
  p = parsed("-/dev/infiniband/uverbs1,default,/dev/kfd");
  ck_assert(!is_fabric_device_allowed(p, "/dev/infiniband/uverbs1"));
  ck_assert(is_fabric_device_allowed(p, "/dev/infiniband/uverbs10"));
  ck_assert(is_fabric_device_allowed(p, "/dev/kfd"));
  p = parsed("default,-/dev/cxi*");
  ck_assert(!is_fabric_device_allowed(p, "/dev/cxi0"));
  ck_assert(is_fabric_device_allowed(p, "/dev/infiniband/rdma_cm"));
  // none forgets what came before it, not what comes after.
  ck_assert(parsed("default,mad,none").include.empty());
  p = parsed("mad,none,default");
  ck_assert(p.include == default_fabric_policy().include);
  ck_assert(!is_fabric_device_allowed(parsed("none"), "/dev/infiniband/uverbs0"));
}
END_TEST

START_TEST(globs_stay_in_their_directory) {
  ck_assert(fabric_pattern_matches("/dev/infiniband/uverbs*", "/dev/infiniband/uverbs12"));
  ck_assert(!fabric_pattern_matches("/dev/infiniband/uverbs*", "/dev/infiniband/umad0"));
  ck_assert(!fabric_pattern_matches("/dev/infiniband/uverbs*", "/dev/infiniband/x/uverbs0"));
  ck_assert(!fabric_pattern_matches("/dev/cxi*", "/dev/cxi/0"));
  ck_assert(fabric_pattern_matches("/dev/hfi1_*", "/dev/hfi1_0"));
  ck_assert(!fabric_pattern_matches("/dev/hfi1_*", "/dev/hfi1"));
  ck_assert(fabric_pattern_matches("/dev/infiniband/uverbs[02]", "/dev/infiniband/uverbs2"));
  ck_assert(!fabric_pattern_matches("/dev/infiniband/uverbs[02]", "/dev/infiniband/uverbs1"));
  ck_assert(fabric_pattern_matches("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm"));
  ck_assert(!fabric_pattern_matches("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm2"));
}
END_TEST

START_TEST(bad_lists_are_refused_in_one_line) {
  ck_assert(refusal("").find("fabric_devices is empty; give 'none'") == 0);
  ck_assert(refusal("default,,mad").find("empty item in 'default,,mad'") != std::string::npos);
  ck_assert(refusal("default,").find("empty item") != std::string::npos);
  std::string m = refusal("umad");
  ck_assert_msg(m.find("'umad' is neither default, mad, none nor a device pattern; write /dev/") !=
                    std::string::npos,
                "%s", m.c_str());
  ck_assert(refusal("infiniband/uverbs*").find("'infiniband/uverbs*' is neither") !=
            std::string::npos);
  struct Case {
    const char* value;
    const char* why;
  };
  for (const Case& c :
       {Case{"/sys/class/infiniband", "'/sys/class/infiniband' is not an absolute path under /dev"},
        Case{"-/etc/passwd", "'/etc/passwd' is not an absolute path under /dev"},
        Case{"/dev", "'/dev' is not an absolute path under /dev"},
        Case{"/dev/infiniband/", "'/dev/infiniband/' names a directory"},
        Case{"/dev/*/uverbs0", "'/dev/*/uverbs0' has a glob character in a directory"},
        Case{"/dev/../etc/x", "has an empty, '.' or '..' component"},
        Case{"/dev//cxi0", "has an empty, '.' or '..' component"},
        Case{"/dev/infiniband/..", "has an empty, '.' or '..' component"},
        Case{"/dev/cxi[0", "'/dev/cxi[0' has a '[' without its ']'"},
        Case{"/dev/cxi\\*", "contains a backslash"}}) {
    m = refusal(c.value);
    ck_assert_msg(m.find(c.why) != std::string::npos, "%s: %s", c.value, m.c_str());
    ck_assert_msg(m.find("e.g. /dev/infiniband/umad*") != std::string::npos, "no fix: %s",
                  m.c_str());
  }
  // The key is the one the caller names (SLIPWAY_FABRIC_DEVICES for `slipway run`).
  auto p = parse_fabric_policy("nope", "SLIPWAY_FABRIC_DEVICES");
  ck_assert(!p.ok() && p.status().message().rfind("SLIPWAY_FABRIC_DEVICES: 'nope'", 0) == 0);
}
END_TEST

START_TEST(plan_binds_character_devices_only) {
  enter_user_and_mount_namespace();
  const std::string root = make_fabric_node();
  FabricPlan plan = plan_fabric(root, default_fabric_policy());
  ck_assert(plan.devices == Paths({"/dev/cxi0", "/dev/hfi1_0", "/dev/infiniband/rdma_cm",
                                   "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"}));
  ck_assert(fabric_devices_left_out(root, default_fabric_policy()) ==
            Paths({"/dev/infiniband/issm0", "/dev/infiniband/umad0"}));
  ck_assert_int_eq(static_cast<int>(plan.binds.size()), 5);
  for (size_t i = 0; i < plan.binds.size(); ++i) {
    const Bind& b = plan.binds[i].bind;
    EXPECT_STR(b.destination, plan.devices[i]);
    EXPECT_STR(b.source, root + plan.devices[i]);
    // Read-write, devices usable (the runtime adds nosuid), no submounts, skipped if gone.
    ck_assert(!b.read_only && b.allow_devices && !b.recursive && b.optional && !b.no_exec);
  }
  const FabricPolicy some = parsed("default,mad,-/dev/infiniband/uverbs1,-/dev/cxi*");
  plan = plan_fabric(root, some);
  ck_assert(plan.devices ==
            Paths({"/dev/hfi1_0", "/dev/infiniband/issm0", "/dev/infiniband/rdma_cm",
                   "/dev/infiniband/umad0", "/dev/infiniband/uverbs0"}));
  ck_assert(fabric_devices_left_out(root, some) == Paths({"/dev/cxi0", "/dev/infiniband/uverbs1"}));
  // A pattern naming the non-devices binds nothing of them.
  plan = plan_fabric(root, parsed("/dev/infiniband/uverbs-by-path,/dev/cxi_notes,/dev/hfi1_link"));
  ck_assert(plan.devices.empty() && plan.binds.empty());
  ck_assert(plan_fabric(root, parsed("none")).devices.empty());
  ck_assert(plan_fabric(make_scratch(), default_fabric_policy()).devices.empty());
}
END_TEST

START_TEST(ib_device_names_come_from_sysfs) {
  enter_user_and_mount_namespace();
  const std::string root = make_fabric_node();
  EXPECT_STR(fabric_ib_device(root, "/dev/infiniband/uverbs1"), "mlx5_1");
  EXPECT_STR(fabric_ib_device(root, "/dev/infiniband/umad0"), "mlx5_0");
  EXPECT_STR(fabric_ib_device(root, "/dev/infiniband/issm0"), "");
  EXPECT_STR(fabric_ib_device(root, "/dev/cxi0"), "");
  EXPECT_STR(fabric_ib_device(root, "/dev/infiniband/rdma_cm"), "");
}
END_TEST

START_TEST(doctor_reports_fabric_devices_and_memlock) {
  enter_user_and_mount_namespace();
  Finding none = check_fabric(make_scratch(), default_fabric_policy());
  ck_assert(none.verdict == Verdict::kSkip);
  EXPECT_STR(none.detail,
             "no RDMA or fabric devices (/dev/infiniband/uverbs*, "
             "/dev/infiniband/rdma_cm, /dev/cxi*, /dev/hfi1_*)");
  const std::string root = make_fabric_node();
  struct rlimit lim = {};
  ck_assert_int_eq(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  const rlim_t hard = lim.rlim_max;
  lim.rlim_cur = 64 * 1024;
  ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &lim), 0);
  Finding f = check_fabric(root, default_fabric_policy());
  ck_assert(f.verdict == Verdict::kWarn);
  EXPECT_STR(f.detail,
             "5 fabric device(s) bound into containers: /dev/cxi0, /dev/hfi1_0, "
             "/dev/infiniband/rdma_cm, /dev/infiniband/uverbs0 (mlx5_0), /dev/infiniband/uverbs1 "
             "(mlx5_1); left out by fabric_devices: /dev/infiniband/issm0, /dev/infiniband/umad0; "
             "/sys/class/infiniband: mlx5_0, mlx5_1; RLIMIT_MEMLOCK is 64.0 KiB, which limits the "
             "memory RDMA may register");
  ck_assert(f.fix.find("memlock unlimited") != std::string::npos);
  ck_assert(format_findings({f}).rfind("warn  fabric: 5 fabric device(s)", 0) == 0);
  // Nothing bound (none): nothing to say about the limit.
  Finding off = check_fabric(root, parsed("none"));
  ck_assert(off.verdict == Verdict::kOk);
  ck_assert(off.detail.rfind("no fabric device bound into containers; left out by fabric_devices: "
                             "/dev/cxi0, /dev/hfi1_0, /dev/infiniband/issm0, ",
                             0) == 0);
  if (hard == RLIM_INFINITY) {  // unlimited is what sites set: then all is well
    lim.rlim_cur = RLIM_INFINITY;
    ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &lim), 0);
    f = check_fabric(root, default_fabric_policy());
    ck_assert(f.verdict == Verdict::kOk);
    ck_assert(f.detail.find("; RLIMIT_MEMLOCK unlimited") != std::string::npos);
  }
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("dl_fabric");
  TCase* tc = tcase_create("fabric");
  tcase_add_test(tc, default_policy_is_verbs_cm_slingshot_omnipath);
  tcase_add_test(tc, lists_add_restrict_and_replace);
  tcase_add_test(tc, globs_stay_in_their_directory);
  tcase_add_test(tc, bad_lists_are_refused_in_one_line);
  tcase_add_test(tc, plan_binds_character_devices_only);
  tcase_add_test(tc, ib_device_names_come_from_sysfs);
  tcase_add_test(tc, doctor_reports_fabric_devices_and_memlock);
  suite_add_tcase(s, tc);
  return s;
}
