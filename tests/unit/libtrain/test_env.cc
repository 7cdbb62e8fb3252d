// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libtrain's environment parser (libtrain/src/env.h) and its users: malformed, negative,
// out-of-range and overflowing values are rejected with one line naming the variable and the value;
// unset and empty mean the default.
#include <cstdlib>
#include <string>

#include "env.h"
#include "libtrain/bootstrap.h"
#include "libtrain/communicator.h"
#include "libtrain/errors.h"
#include "libtrain/training.h"
// check.h last: it defines macros (fail) that clash with <ios>.
#include "check_main.h"

using namespace libtrain;
using namespace libtrain::detail;

namespace {

// The message of what `fn` threw as InvalidArgument; "" when it threw nothing.
template <typename Fn> std::string rejection(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

void expect_rejected(const char* name, const char* value, const std::string& message) {
  ck_assert_msg(!message.empty(), "%s='%s' accepted", name, value);
  ck_assert_msg(message.find(name) != std::string::npos, "no %s in: %s", name, message.c_str());
  ck_assert_msg(message.rfind("libtrain: ", 0) == 0, "no prefix: %s", message.c_str());
  ck_assert_msg(message.find('\n') == std::string::npos, "not one line: %s", message.c_str());
}

const char* const kMalformed[] = {"abc", "-1", "12x", "99999999999999999999999", " 5", "+5", "0x10", "1.5",
                                  "5 ", "1e3"};

}  // namespace

START_TEST(whole_numbers_are_parsed) {
  ck_assert_uint_eq(parse_whole("X", "0", 0, 10, ""), 0);
  ck_assert_uint_eq(parse_whole("X", "007", 0, 10, ""), 7);
  ck_assert_uint_eq(parse_whole("X", "18446744073709551615", 0, UINT64_MAX, ""), UINT64_MAX);
}
END_TEST

START_TEST(malformed_whole_numbers_name_the_variable_and_value) {
  for (const char* bad : kMalformed)
    expect_rejected("LIBTRAIN_X", bad, rejection([&] { parse_whole("LIBTRAIN_X", bad, 0, UINT64_MAX, "bytes"); }));
  expect_rejected("LIBTRAIN_X", "", rejection([] { parse_whole("LIBTRAIN_X", "", 0, 10, ""); }));
  // Overflow by one past 2^64 - 1, and bounds on both sides.
  expect_rejected("X", "18446744073709551616",
                  rejection([] { parse_whole("X", "18446744073709551616", 0, UINT64_MAX, ""); }));
  expect_rejected("X", "11", rejection([] { parse_whole("X", "11", 0, 10, ""); }));
  expect_rejected("X", "3", rejection([] { parse_whole("X", "3", 4, 10, ""); }));
  std::string chunk = rejection([] { parse_whole("LIBTRAIN_SHM_CHUNK", "12x", 4096, 1 << 30, "bytes"); });
  ck_assert_str_eq(chunk.c_str(),
                   "libtrain: LIBTRAIN_SHM_CHUNK='12x' must be a whole number of bytes from 4096 to 1073741824");
  std::string rank = rejection([] { parse_whole("RANK", "-1", 0, 9, ""); });
  ck_assert_str_eq(rank.c_str(), "libtrain: RANK='-1' must be a whole number from 0 to 9");
  // A value with a newline still makes a one-line message.
  expect_rejected("X", "1\n2", rejection([] { parse_whole("X", "1\n2", 0, 10, ""); }));
}
END_TEST

START_TEST(unset_and_empty_mean_the_default) {
  unsetenv("LIBTRAIN_TEST_VALUE");
  ck_assert_uint_eq(env_whole("LIBTRAIN_TEST_VALUE", 42, 0, 10, ""), 42);
  setenv("LIBTRAIN_TEST_VALUE", "", 1);
  ck_assert_uint_eq(env_whole("LIBTRAIN_TEST_VALUE", 42, 0, 10, ""), 42);
  ck_assert_ptr_null(env_text("LIBTRAIN_TEST_VALUE"));
  setenv("LIBTRAIN_TEST_VALUE", "7", 1);
  ck_assert_uint_eq(env_whole("LIBTRAIN_TEST_VALUE", 42, 0, 10, ""), 7);
  unsetenv("LIBTRAIN_TEST_VALUE");
  std::string unset = rejection([] { env_whole_required("LIBTRAIN_TEST_VALUE", 0, 10, ""); });
  ck_assert_str_eq(unset.c_str(), "libtrain: LIBTRAIN_TEST_VALUE is not set");
}
END_TEST

START_TEST(seconds_are_positive_finite_decimals) {
  ck_assert(parse_seconds("T", "2.5", 1e9) == 2.5);
  ck_assert(parse_seconds("T", "1e3", 1e9) == 1000.0);
  ck_assert(parse_seconds("T", ".5", 1e9) == 0.5);
  for (const char* bad : {"abc", "-1", "0", "12x", "inf", "nan", " 5", "+5", "0x10", "1e400", "1e-400", "2e9"})
    expect_rejected("LIBTRAIN_TIMEOUT", bad, rejection([&] { parse_seconds("LIBTRAIN_TIMEOUT", bad, 1e9); }));
  std::string negative = rejection([] { parse_seconds("LIBTRAIN_TIMEOUT", "-1", 1e9); });
  ck_assert_str_eq(negative.c_str(),
                   "libtrain: LIBTRAIN_TIMEOUT='-1' must be a number of seconds above 0 and at most 1000000000");
}
END_TEST

// Every whole-number setting libtrain reads goes through the parser.
START_TEST(every_setting_rejects_malformed_values) {
  const char* const options[] = {"LIBTRAIN_SHM_CHUNK",    "LIBTRAIN_SHM_ONE_PHASE", "LIBTRAIN_SHM_YIELD_US",
                                 "LIBTRAIN_RING_WHOLE",   "LIBTRAIN_RING_SPIN_US",  "LIBTRAIN_CMA_MIN",
                                 "LIBTRAIN_COMPUTE_THREADS", "LIBTRAIN_TIMEOUT"};
  for (const char* name : options) {
    for (const char* bad : kMalformed) {
      if (std::string(name) == "LIBTRAIN_TIMEOUT" && (std::string(bad) == "1.5" || std::string(bad) == "1e3"))
        continue;  // seconds may have a fraction and an exponent
      setenv(name, bad, 1);
      expect_rejected(name, bad, rejection([] { CommunicatorOptions::from_env(); }));
    }
    setenv(name, "", 1);
    ck_assert_msg(rejection([] { CommunicatorOptions::from_env(); }).empty(), "%s= rejected", name);
    unsetenv(name);
  }
  // Above the documented maxima: no longer clamped, rejected.
  setenv("LIBTRAIN_SHM_YIELD_US", "60000001", 1);
  expect_rejected("LIBTRAIN_SHM_YIELD_US", "60000001", rejection([] { CommunicatorOptions::from_env(); }));
  unsetenv("LIBTRAIN_SHM_YIELD_US");
  setenv("LIBTRAIN_SHM_CHUNK", "4095", 1);
  expect_rejected("LIBTRAIN_SHM_CHUNK", "4095", rejection([] { CommunicatorOptions::from_env(); }));
  unsetenv("LIBTRAIN_SHM_CHUNK");
  CommunicatorOptions d = CommunicatorOptions::from_env();
  ck_assert_uint_eq(d.shm_chunk_bytes, kAuto);
  ck_assert_int_eq(d.shm_yield_us, 20000);
  ck_assert_int_eq(d.compute_threads, 0);
  ck_assert(d.timeout.count() == 300.0);
  setenv("LIBTRAIN_COMPUTE_THREADS", "8", 1);
  ck_assert_int_eq(CommunicatorOptions::from_env().compute_threads, 8);
  unsetenv("LIBTRAIN_COMPUTE_THREADS");
}
END_TEST

START_TEST(bootstrap_variables_are_checked) {
  unsetenv("PMIX_RANK");
  unsetenv("LIBTRAIN_BOOTSTRAP");
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "1", 1);
  for (const char* bad : kMalformed) {
    setenv("RANK", bad, 1);
    expect_rejected("RANK", bad, rejection([] { bootstrap_env(Seconds(1)); }));
  }
  setenv("RANK", "0", 1);
  for (const char* bad : {"-1", "0", "65536", "80x"}) {
    setenv("MASTER_PORT", bad, 1);
    expect_rejected("MASTER_PORT", bad, rejection([] { bootstrap_env(Seconds(1)); }));
  }
  setenv("WORLD_SIZE", "0", 1);
  expect_rejected("WORLD_SIZE", "0", rejection([] { bootstrap_env(Seconds(1)); }));
  unsetenv("RANK");
  setenv("WORLD_SIZE", "2", 1);
  expect_rejected("RANK", "", rejection([] { bootstrap_env(Seconds(1)); }));
}
END_TEST

START_TEST(fusion_bytes_are_checked) {
  setenv("LIBTRAIN_FUSION_BYTES", "1", 1);
  setenv("LIBTRAIN_BOOTSTRAP", "single", 1);
  init();
  for (const char* bad : kMalformed) {
    setenv("LIBTRAIN_FUSION_BYTES", bad, 1);
    expect_rejected("LIBTRAIN_FUSION_BYTES", bad, rejection([] { GradientReducer r(world()); }));
  }
  setenv("LIBTRAIN_FUSION_BYTES", "", 1);
  ck_assert(rejection([] { GradientReducer r(world()); }).empty());
  shutdown();
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("libtrain_env");
  TCase* tc = tcase_create("env");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, whole_numbers_are_parsed);
  tcase_add_test(tc, malformed_whole_numbers_name_the_variable_and_value);
  tcase_add_test(tc, unset_and_empty_mean_the_default);
  tcase_add_test(tc, seconds_are_positive_finite_decimals);
  tcase_add_test(tc, every_setting_rejects_malformed_values);
  tcase_add_test(tc, bootstrap_variables_are_checked);
  tcase_add_test(tc, fusion_bytes_are_checked);
  suite_add_tcase(s, tc);
  return s;
}
