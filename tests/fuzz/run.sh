#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.cc) with clang, ASan and UBSan in their own build
# directory and runs each for SECONDS from its seed corpus, nproc of them at a time. Prints one
# line per target (executions, exec/s, time); exits non-zero on any crash, leak, timeout or
# sanitizer report, 3 when clang or libFuzzer is missing. Usage: run.sh SECONDS [NAME...]
# Environment: SLIPWAY_FUZZ_BUILD_DIR (<repo>/build-fuzz), SLIPWAY_FUZZ_JOBS (nproc),
# SLIPWAY_FUZZ_CORPUS (keep the grown corpora there, one folder per target; default: thrown away).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${SLIPWAY_FUZZ_BUILD_DIR:-$repo/build-fuzz}
jobs=${SLIPWAY_FUZZ_JOBS:-$(nproc)}
seconds=${1:?usage: run.sh SECONDS [NAME...]}
shift
[[ $seconds =~ ^[0-9]+$ ]] || { echo "run.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2; }

# Every target, in the order of tests/fuzz/README.md; NAME arguments pick some.
all=(image_ref manifest registry_auth options plugin_args layer libtrain_wire site_settings squashfs
  local_archive)
names=("$@")
((${#names[@]})) || names=("${all[@]}")

fuzzer_lib() { clang++ -print-resource-dir 2>/dev/null | sed 's|$|/lib/linux/libclang_rt.fuzzer-x86_64.a|'; }
if ! command -v clang++ >/dev/null || [[ ! -f $(fuzzer_lib) ]]; then
  echo "fuzz: skipped: clang/libFuzzer not installed (apt-get install clang libclang-rt-14-dev)"
  exit 3
fi

flags="-O1 -gline-tables-only"
mkdir -p "$build"
# The same cache as tests/sanitizers/run.sh, which builds the unit tests in this tree (under ASan
# and UBSan, on these libraries): a different one would rebuild them on each script's turn.
CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -DSLIPWAY_FUZZ=ON -DSLIPWAY_BUILD_TESTS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >"$build/build.log" 2>&1 ||
  { tail -n 60 "$build/build.log"; exit 1; }

work=$(mktemp -d /tmp/slipway-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
grown=${SLIPWAY_FUZZ_CORPUS:-$work/corpus}
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"

# One target: new inputs go to $grown/NAME, the repository's seeds are only read;
# a crashing input is kept in $artifacts. Symbolized reports need llvm-symbolizer (package llvm).
run_one() {
  local name=$1 log="$work/$1.log" start=$SECONDS
  mkdir -p "$grown/$name"
  local rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$grown/$name" "$here/corpus/$name" \
    >"$log" 2>&1 || rc=$?
  local runs rate
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  if ((rc == 0)) && ! grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    printf 'ok   fuzz_%s: %s runs in %d s, %s exec/s\n' "$name" "${runs:-?}" $((SECONDS - start)) "${rate:-?}"
  else
    grep -E 'ERROR:|runtime error:|SUMMARY:|Test unit written|^    #[0-9] ' "$log" | head -n 30
    printf 'FAIL fuzz_%s: exit %d after %d s; full log: %s\n' "$name" "$rc" $((SECONDS - start)) \
      "$artifacts/$name.log"
    cp "$log" "$artifacts/$name.log"
    return 1
  fi
}

failed=0
pids=()
for n in "${names[@]}"; do
  run_one "$n" >"$work/$n.result" &
  pids+=($!)
  if ((${#pids[@]} >= jobs)); then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
for n in "${names[@]}"; do cat "$work/$n.result"; done
exit "$failed"
