// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Unit tests for LazyLibrary and its forwarders (common/lazy_library.h): a missing library gives an
// error naming the package and makes forwarders return their failure value; a present one loads
// only when first called (libarchive here: this test does not link it).
#include <dlfcn.h>

#include <archive.h>

#include <cstring>
#include <string>

#include "check_main.h"
#include "common/lazy_library.h"
#include "image/archive_lazy.h"

using slipway::launcher::LazyLibrary;

namespace {
LazyLibrary& missing() {
  static LazyLibrary lib("libslipway-no-such-library.so.0", "the slipway-test package");
  return lib;
}
}  // namespace

extern "C" int slipway_test_absent(int x);
extern "C" void slipway_test_absent_void(int x);
SLIPWAY_LAZY_FORWARD(missing(), int, slipway_test_absent, (int x), (x), -7)
SLIPWAY_LAZY_FORWARD_VOID(missing(), slipway_test_absent_void, (int x), (x))

START_TEST(missing_library_names_the_package) {
  auto st = missing().load();
  ck_assert(!st.ok());
  ck_assert_int_eq(st.error_number(), ELIBACC);
  ck_assert_ptr_nonnull(strstr(st.message().c_str(), "libslipway-no-such-library.so.0"));
  ck_assert_ptr_nonnull(strstr(st.message().c_str(), "install the slipway-test package"));
  ck_assert_ptr_null(missing().symbol("anything"));
  const std::string again = missing().load().message();
  ck_assert_str_eq(again.c_str(), st.message().c_str());  // the same answer, not a second try
}
END_TEST

START_TEST(forwarders_of_a_missing_library_fail_cleanly) {
  ck_assert_int_eq(slipway_test_absent(3), -7);
  slipway_test_absent_void(3);  // returns without calling anything
}
END_TEST

START_TEST(present_library_loads_on_first_call) {
  ck_assert_ptr_null(dlopen("libarchive.so.13", RTLD_NOW | RTLD_NOLOAD));  // not linked
  struct archive* a = archive_read_new();  // our forwarder
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(archive_read_support_format_tar(a), ARCHIVE_OK);
  ck_assert_int_eq(archive_read_free(a), ARCHIVE_OK);
  void* h = dlopen("libarchive.so.13", RTLD_NOW | RTLD_NOLOAD);
  ck_assert_ptr_nonnull(h);
  dlclose(h);
  ck_assert(slipway::launcher::archive_library().load().ok());
}
END_TEST

START_TEST(symbols_resolve_in_the_loaded_library) {
  LazyLibrary libm("libm.so.6", "libc6");
  using Cos = double (*)(double);
  auto cos_fn = reinterpret_cast<Cos>(libm.symbol("cos"));
  ck_assert_ptr_nonnull(reinterpret_cast<void*>(cos_fn));
  ck_assert(cos_fn(0.0) == 1.0);
  ck_assert_ptr_null(libm.symbol("slipway_no_such_symbol"));
}
END_TEST

Suite* make_suite(void) {
  Suite* s = suite_create("lazy_library");
  TCase* tc = tcase_create("core");
  tcase_add_test(tc, missing_library_names_the_package);
  tcase_add_test(tc, forwarders_of_a_missing_library_fail_cleanly);
  tcase_add_test(tc, present_library_loads_on_first_call);
  tcase_add_test(tc, symbols_resolve_in_the_loaded_library);
  suite_add_tcase(s, tc);
  return s;
}
