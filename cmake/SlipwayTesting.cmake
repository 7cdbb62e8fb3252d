# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# slipway_check_test(NAME SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s])
# One Check executable per unit, registered with CTest. Check runs each test in a forked child
# (CK_FORK=yes) so a test may unshare() or crash without touching its neighbours.
# Labels say what a test needs: unit, userns, cluster, gpu; every Check executable also has
# the label `check` (what tests/sanitizers/run.sh runs: scripts and Python tests have not).
#
# In a SLIPWAY_SANITIZE build (or the fuzz build, whose every target has ASan and UBSan:
# tests/fuzz/flags.cmake) every test gets the sanitizers' options, so `ctest` there needs no
# environment: a report fails the test (UBSan aborts, -fno-sanitize-recover; TSan exits 66),
# with its stack; leaks inside other projects' libraries are suppressed
# (tests/sanitizers/lsan.supp). Forked children that leave through _exit, as the rank helpers'
# do, run no leak check; those that return from a Check test do.
set(SLIPWAY_SANITIZER_ENV
  "ASAN_OPTIONS=detect_leaks=1"
  "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/lsan.supp:print_suppressions=0"
  "UBSAN_OPTIONS=print_stacktrace=1"
  "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1")
# A TIMEOUT catches a hang, it measures nothing: each is at least 3 times the test's time on a
# 2-core machine busy with the rest of contrib/run-tests.sh (the image builds run beside the
# unit tests). Sanitizers slow a test several times more (TSan most), so there every CTest
# TIMEOUT and every Check test's own timeout (CK_TIMEOUT_MULTIPLIER) is 4 times longer: with
# 60 s, libtrain_test_allreduce (42 s plain, under load) timed out under TSan.
set(SLIPWAY_TIMEOUT_FACTOR 4)
if(NOT SLIPWAY_SANITIZE AND NOT SLIPWAY_FUZZ)
  set(SLIPWAY_SANITIZER_ENV "")
  set(SLIPWAY_TIMEOUT_FACTOR 1)
endif()
function(slipway_check_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE PkgConfig::CHECK slipway_warnings ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/common)
  add_test(NAME ${name} COMMAND ${name})
  set(env CK_FORK=yes CK_DEFAULT_TIMEOUT=60 CK_TIMEOUT_MULTIPLIER=${SLIPWAY_TIMEOUT_FACTOR} ${SLIPWAY_SANITIZER_ENV})
  math(EXPR timeout "${T_TIMEOUT} * ${SLIPWAY_TIMEOUT_FACTOR}")
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS};check" TIMEOUT ${timeout}
    ENVIRONMENT "${env}" SKIP_RETURN_CODE 77)
endfunction()

# slipway_sanitizer_options(TEST ASAN_OPTIONS): in a sanitizer build, TEST runs with
# these ASan options instead of the ones above; say why beside the call.
function(slipway_sanitizer_options test asan_options)
  if(SLIPWAY_SANITIZER_ENV)
    get_test_property(${test} ENVIRONMENT env)
    list(FILTER env EXCLUDE REGEX "^ASAN_OPTIONS=")
    list(APPEND env "ASAN_OPTIONS=${asan_options}")
    set_tests_properties(${test} PROPERTIES ENVIRONMENT "${env}")
  endif()
endfunction()
