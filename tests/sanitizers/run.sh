#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Runs the Check unit tests under the sanitizers (issue 16): those labelled unit or userns under
# ASan+UBSan, libtrain's under TSan. ASan+UBSan use the fuzz targets' clang tree, configured as
# tests/fuzz/run.sh configures it: its libraries have ASan and UBSan already, so only the tests are
# compiled here (without clang, a gcc tree of its own). TSan: a gcc tree with only libtrain and its
# tests. The options each test runs with are in cmake/SlipwayTesting.cmake. Prints one line per
# sanitizer ("ok   sanitize asan+ubsan: ..." or "FAIL ..." with the failed tests' output); exits
# non-zero on any failure. Not run: scripts and Python tests (not Check executables, label
# `check`): the Python ones load libtrain into /usr/bin/python3 and torch, which are not
# instrumented (the runtime would have to be LD_PRELOADed and torch's own races and leaks
# suppressed); the scripts check the normal build's files (exported symbols, linked libraries,
# man pages, install), not code that runs.
# Environment: SLIPWAY_FUZZ_BUILD_DIR (<repo>/build-fuzz), SLIPWAY_ASAN_BUILD_DIR
# (<repo>/build-asan, only without clang), SLIPWAY_TSAN_BUILD_DIR (<repo>/build-tsan).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
jobs=$(nproc)
work=$(mktemp -d /tmp/slipway-sanitize.XXXXXX)
trap 'rm -rf "$work"' EXIT

# configure NAME DIR CMAKE-ARGS...: quiet unless it fails.
configure() {
  local name=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  cmake -S "$repo" -B "$dir" -DSLIPWAY_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" \
    >"$work/$name.configure" 2>&1 && return 0
  cat "$work/$name.configure"
  echo "FAIL sanitize $name: cmake could not configure $dir"
  return 1
}

# run NAME DIR CTEST-SELECTION...: builds the Check executables the selection runs (a Check
# test's name is its target's, or TARGET.CASE for one that runs a single case of TARGET) and
# runs them; one summary line.
run() {
  local name=$1 dir=$2 start=$SECONDS
  shift 2
  local tests targets
  mapfile -t tests < <(ctest --test-dir "$dir" -N -L check "$@" | sed -n 's/^ *Test *#[0-9]*: //p')
  if ((${#tests[@]} == 0)); then
    echo "FAIL sanitize $name: no test selected in $dir"
    return 1
  fi
  mapfile -t targets < <(printf '%s\n' "${tests[@]}" | sed 's/\..*//' | sort -u)
  if ! cmake --build "$dir" -j"$jobs" --target "${targets[@]}" >"$work/$name.build" 2>&1; then
    tail -n 60 "$work/$name.build"
    echo "FAIL sanitize $name: build failed in $dir"
    return 1
  fi
  local built=$((SECONDS - start)) log="$work/$name.ctest"
  ctest --test-dir "$dir" -L check "$@" --output-on-failure -j"$jobs" >"$log" 2>&1
  local rc=$? failed
  failed=$(grep -cE 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception|Not Run)' "$log")
  if ((rc == 0)); then
    printf 'ok   sanitize %s: %d tests in %d s (build %d s)\n' "$name" "${#tests[@]}" \
      $((SECONDS - start)) "$built"
    return 0
  fi
  cat "$log"
  printf 'FAIL sanitize %s: %d of %d tests failed (ctest exit %d) after %d s\n' "$name" "$failed" \
    "${#tests[@]}" "$rc" $((SECONDS - start))
  return 1
}

status=0

# ASan+UBSan. The flags must be tests/fuzz/run.sh's exactly, or each script's configure would
# change the other's and rebuild every library.
fuzz_flags="-O1 -gline-tables-only"
fuzzer_lib=$(clang++ -print-resource-dir 2>/dev/null)/lib/linux/libclang_rt.fuzzer-x86_64.a
if command -v clang++ >/dev/null && [[ -f $fuzzer_lib ]]; then
  asan_dir=${SLIPWAY_FUZZ_BUILD_DIR:-$repo/build-fuzz}
  CC=clang CXX=clang++ configure asan+ubsan "$asan_dir" -DSLIPWAY_FUZZ=ON \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$fuzz_flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$fuzz_flags" ||
    status=1
else
  asan_dir=${SLIPWAY_ASAN_BUILD_DIR:-$repo/build-asan}
  configure asan+ubsan "$asan_dir" -DSLIPWAY_SANITIZE=address,undefined \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" ||
    status=1
fi
((status)) || run asan+ubsan "$asan_dir" -L 'unit|userns' || status=1

# TSan: libtrain is the part with threads of its own (its communicators' workers, the shared
# memory group, the TCP store's server).
tsan_dir=${SLIPWAY_TSAN_BUILD_DIR:-$repo/build-tsan}
if configure tsan "$tsan_dir" -DSLIPWAY_SANITIZE=thread \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"; then
  run tsan "$tsan_dir" -L unit -R '^libtrain_' || status=1
else
  status=1
fi
exit "$status"
