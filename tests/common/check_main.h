// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Shared main() for Check unit tests: runs one suite and exits 0 only when every test passed.
// Each test file defines `Suite* make_suite(void)` and includes this header once.
#pragma once

#include <check.h>
#include <stdlib.h>

#include "check_text.h"  // ck_assert_str_eq that outlives temporaries

Suite* make_suite(void);

int main(void) {
  SRunner* runner = srunner_create(make_suite());
  srunner_run_all(runner, CK_NORMAL);
  int failed = srunner_ntests_failed(runner);
  srunner_free(runner);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
