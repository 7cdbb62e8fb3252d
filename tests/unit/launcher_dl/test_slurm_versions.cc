// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for launcher/dl/slurm_versions.h: the release of a version string, the doctor's
// verdict on tested and untested Slurm releases, and asking `sinfo --version` (a fake sinfo on
// PATH stands for a node's Slurm), and that README and the man page state the tested stacks.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "dl/slurm_versions.h"
#include "dl_test_util.h"

#include "check_main.h"  // last: check.h defines a fail() macro

using namespace slipway::launcher;

START_TEST(release_of_version_strings) {
  EXPECT_STR(slurm_release_of("slurm 22.05.8"), "22.05");
  EXPECT_STR(slurm_release_of("slurm-wlm 24.11.5"), "24.11");
  EXPECT_STR(slurm_release_of("23.11"), "23.11");
  EXPECT_STR(slurm_release_of("slurm 25.05.0-0rc1"), "25.05");
  EXPECT_STR(slurm_release_of("slurm"), "");
  EXPECT_STR(slurm_release_of("slurm 24"), "");
  EXPECT_STR(slurm_release_of(""), "");
}
END_TEST

START_TEST(tested_releases_are_ok) {
  for (const auto& t : kTestedSlurm) {
    Finding f = check_slurm_version("slurm " + std::string(t.release) + ".3");
    ck_assert(f.verdict == Verdict::kOk);
    EXPECT_STR(f.check, "slurm");
    ck_assert_msg(f.detail.find("release " + std::string(t.release) + " is tested") != std::string::npos,
                  "%s", f.detail.c_str());
  }
  EXPECT_STR(check_slurm_version("slurm 22.05.8").detail,
             "slurm 22.05.8: release 22.05 is tested (Slurm 22.05 with PMIx 4.2.2 and Open MPI "
             "4.1.4 on Debian 12)");
}
END_TEST

START_TEST(untested_release_warns) {
  Finding f = check_slurm_version("slurm 23.11.4");
  ck_assert(f.verdict == Verdict::kWarn);
  EXPECT_STR(f.detail, "slurm 23.11.4 is not a release Slipway is tested on (tested: 22.05, 24.11)");
  ck_assert(f.fix.find("build the plugin against this Slurm") == 0);
  // forky's Slurm: the plugin builds and loads there, but the suite does not run on it.
  ck_assert(check_slurm_version("slurm 26.05.1").verdict == Verdict::kWarn);
  ck_assert(check_slurm_version("").verdict == Verdict::kSkip);
}
END_TEST

START_TEST(installed_version_from_sinfo) {
  // Check forks each test: PATH may change freely.
  std::string bin = make_scratch();
  write_file(bin + "/sinfo", "#!/bin/sh\n[ \"$1\" = --version ] && echo 'slurm 23.02.7'\n");
  ck_assert_int_eq(chmod((bin + "/sinfo").c_str(), 0755), 0);
  setenv("PATH", bin.c_str(), 1);
  EXPECT_STR(installed_slurm_version(), "slurm 23.02.7");
  ck_assert(check_slurm_version(installed_slurm_version()).verdict == Verdict::kWarn);
  // A failing sinfo, and none at all: no version.
  write_file(bin + "/sinfo", "#!/bin/sh\necho 'sinfo: error: broken' >&2\nexit 1\n");
  EXPECT_STR(installed_slurm_version(), "");
  setenv("PATH", (bin + "/none").c_str(), 1);
  EXPECT_STR(installed_slurm_version(), "");
}
END_TEST

// README and man spank_slipway state each tested stack as the table has it.
START_TEST(docs_state_the_tested_stacks) {
  for (const char* doc : {"/README.md", "/man/spank_slipway.8"}) {
    std::ifstream in(std::string(SLIPWAY_SOURCE_DIR) + doc);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ck_assert_msg(!text.empty(), "cannot read %s", doc);
    for (const auto& t : kTestedSlurm)
      ck_assert_msg(text.find(tested_stack(t)) != std::string::npos, "%s does not say '%s'", doc,
                    tested_stack(t).c_str());
  }
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("dl_slurm_versions");
  TCase* tc = tcase_create("slurm_versions");
  tcase_add_test(tc, release_of_version_strings);
  tcase_add_test(tc, tested_releases_are_ok);
  tcase_add_test(tc, untested_release_warns);
  tcase_add_test(tc, installed_version_from_sinfo);
  tcase_add_test(tc, docs_state_the_tested_stacks);
  suite_add_tcase(s, tc);
  return s;
}
