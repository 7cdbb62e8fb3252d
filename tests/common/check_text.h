// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// ck_assert_str_eq for C++ tests. Check's own macro keeps only the `const char*` of each operand,
// in a local declared by the macro, so `ck_assert_str_eq(f().message().c_str(), "x")` compared
// the bytes of a temporary already destroyed (ASan: stack-use-after-scope in test_status,
// test_file_util, test_manifest, test_layer; the tests passed because the stack still held
// them). This one copies each operand into a std::string first; its message is Check's.
#pragma once

#include <check.h>

#include <optional>
#include <string>

inline std::optional<std::string> slipway_ck_text(const char* s) {
  return s ? std::optional<std::string>(s) : std::nullopt;
}
inline std::optional<std::string> slipway_ck_text(const std::string& s) { return s; }
inline const char* slipway_ck_shown(const std::optional<std::string>& s) {
  return s ? s->c_str() : "(null)";
}

#undef ck_assert_str_eq
#define ck_assert_str_eq(X, Y)                                                              \
  do {                                                                                      \
    const std::optional<std::string> slipway_ck_x_ = slipway_ck_text(X);                    \
    const std::optional<std::string> slipway_ck_y_ = slipway_ck_text(Y);                    \
    ck_assert_msg(slipway_ck_x_ && slipway_ck_y_ && *slipway_ck_x_ == *slipway_ck_y_,       \
                  "Assertion '%s' failed: %s == \"%s\", %s == \"%s\"", #X " == " #Y, #X,    \
                  slipway_ck_shown(slipway_ck_x_), #Y, slipway_ck_shown(slipway_ck_y_));    \
  } while (0)
