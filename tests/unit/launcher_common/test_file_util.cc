// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for the small file helpers (common/file_util.h): bounded reads that refuse or follow a
// final symlink, atomic replacement, and mkdir -p with the mode it is given.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "check_main.h"
#include "common/file_util.h"

using slipway::launcher::make_dirs;
using slipway::launcher::read_file_limited;
using slipway::launcher::Symlinks;
using slipway::launcher::write_file_atomic;

namespace {
std::string temp_dir() {
  char dir[] = "/tmp/slw-file-util-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  return dir;
}
void remove_tree(const std::string& d) { (void)!system(("rm -rf " + d).c_str()); }
mode_t mode_of(const std::string& p) {
  struct stat st;
  ck_assert_int_eq(stat(p.c_str(), &st), 0);
  return st.st_mode & 07777;
}
}  // namespace

START_TEST(make_dirs_creates_missing_parents_with_the_mode) {
  const std::string d = temp_dir();
  const mode_t old_umask = umask(0);
  ck_assert(make_dirs(d + "/a/b/c", 0700).ok());
  umask(old_umask);
  ck_assert_int_eq(mode_of(d + "/a"), 0700);
  ck_assert_int_eq(mode_of(d + "/a/b/c"), 0700);
  ck_assert(make_dirs(d + "/a/b/c", 0700).ok());  // existing: fine
  ck_assert(make_dirs(d + "/a/b/c/", 0700).ok());  // trailing slash
  remove_tree(d);
}
END_TEST

START_TEST(make_dirs_names_what_blocks_it) {
  const std::string d = temp_dir();
  std::ofstream(d + "/file") << "x";
  auto st = make_dirs(d + "/file/sub/dir", 0700);
  ck_assert(!st.ok());
  ck_assert_int_eq(st.error_number(), ENOTDIR);
  ck_assert_ptr_nonnull(strstr(st.message().c_str(), "/file/sub"));
  remove_tree(d);
}
END_TEST

START_TEST(write_file_atomic_replaces_whole_and_leaves_no_temporary) {
  const std::string d = temp_dir();
  ck_assert(write_file_atomic(d + "/f", "first\n").ok());
  ck_assert(write_file_atomic(d + "/f", "second\n").ok());
  ck_assert_str_eq(read_file_limited(d + "/f", 100)->c_str(), "second\n");
  ck_assert_int_eq(mode_of(d + "/f"), 0600);
  // A destination that cannot be replaced: the old directory stays, no temporary is left.
  ck_assert_int_eq(mkdir((d + "/dir").c_str(), 0700), 0);
  auto st = write_file_atomic(d + "/dir", "x");
  ck_assert(!st.ok());
  ck_assert_ptr_nonnull(strstr(st.message().c_str(), "rename"));
  ck_assert_int_eq(system(("test $(ls " + d + " | wc -l) -eq 2").c_str()), 0);
  remove_tree(d);
}
END_TEST

START_TEST(read_file_limited_bounds_and_symlinks) {
  const std::string d = temp_dir();
  std::ofstream(d + "/f") << "hello";
  ck_assert_str_eq(read_file_limited(d + "/f", 5)->c_str(), "hello");
  auto big = read_file_limited(d + "/f", 4);
  ck_assert(!big.ok());
  ck_assert_int_eq(big.status().error_number(), EFBIG);
  ck_assert_int_eq(symlink((d + "/f").c_str(), (d + "/link").c_str()), 0);
  ck_assert(!read_file_limited(d + "/link", 100).ok());  // refused by default
  ck_assert_str_eq(read_file_limited(d + "/link", 100, Symlinks::kFollow)->c_str(), "hello");
  remove_tree(d);
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("file_util");
  TCase* tc = tcase_create("core");
  tcase_add_test(tc, make_dirs_creates_missing_parents_with_the_mode);
  tcase_add_test(tc, make_dirs_names_what_blocks_it);
  tcase_add_test(tc, read_file_limited_bounds_and_symlinks);
  tcase_add_test(tc, write_file_atomic_replaces_whole_and_leaves_no_temporary);
  suite_add_tcase(s, tc);
  return s;
}
