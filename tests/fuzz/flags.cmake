# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Compile flags of the fuzz build (SLIPWAY_FUZZ=ON, clang only; tests/fuzz/run.sh configures it):
# every Slipway target gets libFuzzer's coverage instrumentation plus ASan and UBSan, so the
# production code the targets call is what is instrumented. Included before the libraries.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "SLIPWAY_FUZZ needs clang with libFuzzer: CC=clang CXX=clang++ cmake ...")
endif()
# UBSan findings abort, so libFuzzer counts them as crashes instead of printing and going on.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
  -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
