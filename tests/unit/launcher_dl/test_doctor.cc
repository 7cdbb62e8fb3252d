// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for launcher/dl/doctor.h. "User namespaces off" cannot be set on this machine (even
// root may not write user.max_user_namespaces: it runs in a container), but the limit is per user
// namespace: a child namespace may set its own to 0, and a doctor run inside it then sees exactly
// what a node with the sysctl at 0 shows.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <string>

#include "dl/doctor.h"
#include "dl_test_util.h"

#include "check_main.h"  // last: check.h defines a fail() macro

using namespace slipway::launcher;

START_TEST(doctor_names_user_namespaces_off) {
  // Check forks each test: this process may change its own namespaces freely.
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  ck_assert_int_eq(unshare(CLONE_NEWUSER), 0);
  auto put = [](const char* path, const std::string& v) {
    int fd = open(path, O_WRONLY);
    ck_assert_msg(fd >= 0 && write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size()), "%s", path);
    close(fd);
  };
  put("/proc/self/setgroups", "deny");
  put("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1");
  put("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
  put("/proc/sys/user/max_user_namespaces", "0");
  Finding f = check_user_namespaces();
  ck_assert(f.verdict == Verdict::kFail);
  EXPECT_STR(f.detail, "unprivileged user namespaces are off: user.max_user_namespaces=0");
  ck_assert(f.fix.find("sysctl -w user.max_user_namespaces=") == 0);
  ck_assert(check_overlay_in_userns().verdict == Verdict::kSkip);
}
END_TEST

START_TEST(doctor_on_this_machine) {
  ck_assert(check_user_namespaces().verdict == Verdict::kOk);
  ck_assert(check_overlay_in_userns().verdict == Verdict::kOk);
  ck_assert(check_cache_dir("/tmp/does/not/exist").verdict != Verdict::kFail);
  Finding r = check_registry("127.0.0.1:1", 500);
  ck_assert(r.verdict == Verdict::kFail);
  ck_assert(r.detail.find("cannot connect to 127.0.0.1:1") == 0);
  // A fake GPU node without its control devices.
  std::string root = make_scratch();
  write_file(root + "/dev/nvidia0", "");
  Finding g = check_gpus(root);
  ck_assert(g.verdict == Verdict::kFail);
  ck_assert(g.detail.find("/dev/nvidiactl is missing") != std::string::npos);
  auto sets = parse_host_lib_sets("gone:libslipway-none.so.9");
  auto libs = check_host_libs(*sets);
  ck_assert(libs.size() == 1 && libs[0].verdict == Verdict::kFail);
  std::string text = format_findings({r});
  ck_assert(text.rfind("FAIL  registry: cannot connect", 0) == 0);
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("dl_doctor");
  TCase* tc = tcase_create("doctor");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, doctor_names_user_namespaces_off);
  tcase_add_test(tc, doctor_on_this_machine);
  suite_add_tcase(s, tc);
  return s;
}
