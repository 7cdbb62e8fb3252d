// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for Status / Result and the SLIPWAY_SYS / SLIPWAY_TRY macros.
#include <fcntl.h>

#include "check_main.h"
#include "common/status.h"

using slipway::launcher::Result;
using slipway::launcher::Status;

static int open_line;
static Status open_missing() {
  open_line = __LINE__ + 1;
  SLIPWAY_SYS(::open("/nonexistent/slipway-test", O_RDONLY), "open /nonexistent/slipway-test");
  return Status();
}

static Result<int> half(int x) {
  if (x % 2) return Status::error("odd number " + std::to_string(x));
  return x / 2;
}

static Status chain(int x) {
  SLIPWAY_TRY(half(x));
  return Status();
}

START_TEST(sys_error_names_call_site_and_errno) {
  Status s = open_missing();
  ck_assert(!s.ok());
  ck_assert_int_eq(s.error_number(), ENOENT);
  // The user's line says what failed and why; the call site is for the logs, kept apart.
  ck_assert_str_eq(s.message().c_str(), "open /nonexistent/slipway-test: No such file or directory");
  const std::string where = "test_status.cc:" + std::to_string(open_line);
  ck_assert_str_eq(s.where().c_str(), where.c_str());
  // It travels with the error as context is added.
  Status up = Status(s).context("image 'x'");
  ck_assert_str_eq(up.where().c_str(), where.c_str());
  ck_assert_str_eq(up.message().c_str(), "image 'x': open /nonexistent/slipway-test: No such file or directory");
}
END_TEST

START_TEST(context_prefixes_errors_only) {
  ck_assert(Status().context("x").ok());
  Status s = Status::error("boom", EIO).context("image 'a'");
  ck_assert_str_eq(s.message().c_str(), "image 'a': boom");
  ck_assert_int_eq(s.error_number(), EIO);
}
END_TEST

START_TEST(result_and_try) {
  ck_assert_int_eq(*half(8), 4);
  ck_assert(!half(3).ok());
  ck_assert(chain(2).ok());
  ck_assert_str_eq(chain(5).message().c_str(), "odd number 5");
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("status");
  TCase* tc = tcase_create("core");
  tcase_add_test(tc, sys_error_names_call_site_and_errno);
  tcase_add_test(tc, context_prefixes_errors_only);
  tcase_add_test(tc, result_and_try);
  suite_add_tcase(s, tc);
  return s;
}
