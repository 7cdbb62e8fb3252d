#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The runners' options, without a sandbox: run.bash on a scratch file of three tests (one fails)
# whose setup_file counts its runs and asks which tests are selected, and run-tests.sh --only with no such step, which must stop
# before it installs anything. Usage: test_runners.sh PATH/TO/run.bash PATH/TO/run-tests.sh
set -uo pipefail
run_bash=$1 run_tests=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() {  # check NAME COMMAND...: one assertion
  if "${@:2}"; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}
has() { grep -qE -- "$2" <<<"$1" || { printf 'no line matching /%s/ in:\n%s\n' "$2" "$1"; return 1; }; }

cat >"$tmp/test_fake.bash" <<EOF_TESTS
setup_file() {
  echo run >>"\$SLIPWAY_RUNNER_TMP/setups"
  # common.bash's selected: what setup_file may leave out
  if selected gamma; then echo gamma >>"\$SLIPWAY_RUNNER_TMP/selected"; fi
  if selected delta; then echo delta >>"\$SLIPWAY_RUNNER_TMP/selected"; fi
}
test_alpha() { echo alpha >>"$tmp/ran"; }
test_beta() { echo beta >>"$tmp/ran"; false; }
test_gamma() { echo gamma >>"$tmp/ran"; }
EOF_TESTS

# run NAME ARGS...: run.bash ARGS on the scratch file; sets out and rc; empties the records.
export SLIPWAY_RUNNER_TMP=$tmp
run() {
  rm -f "$tmp/setups" "$tmp/ran" "$tmp/selected"
  out=$("$run_bash" "${@:2}" "$tmp/test_fake.bash" 2>&1)
  rc=$?
}

run all
check "all: counts" has "$out" '^2 passed, 1 failed, 0 skipped$'
check "all: exit status" test "$rc" -ne 0
check "all: setup_file's time" has "$out" '^setup test_fake\.bash \([0-9]+\.[0-9]s\)$'
check "all: each test's time" has "$out" '^ok   test_alpha \([0-9]+\.[0-9]s\)$'
check "all: the failure" has "$out" '^FAIL test_beta '

run k -k 'test_(alpha|gamma)'
check "-k: counts" has "$out" '^2 passed, 0 failed, 0 skipped$'
check "-k: exit status" test "$rc" -eq 0
check "-k: what ran" test "$(paste -sd' ' "$tmp/ran")" = "alpha gamma"

check "all: selected sees the tests to run" test "$(paste -sd' ' "$tmp/selected")" = "gamma"

run k2 -k alpha
check "-k: selected sees only those" test ! -e "$tmp/selected"
run none -k nothing_matches
check "-k matching nothing: no setup_file" test ! -e "$tmp/setups"
check "-k matching nothing: counts" has "$out" '^0 passed, 0 failed, 0 skipped$'

run f -f gamma
check "-f is -k" test "$(paste -sd' ' "$tmp/ran")" = "gamma"

run x -x 'test_fake\.bash:test_beta$'
check "-x: counts" has "$out" '^2 passed, 0 failed, 0 skipped$'

run r -r 3 -k alpha
check "-r: counts" has "$out" '^3 passed, 0 failed, 0 skipped$'
check "-r: runs in a row" test "$(paste -sd' ' "$tmp/ran")" = "alpha alpha alpha"
check "-r: one setup_file" test "$(wc -l <"$tmp/setups")" -eq 1

run r0 -r 0
check "-r 0: refused" test "$rc" -eq 2
check "-r 0: says why" has "$out" '^run\.bash: -r 0: not a count'
check "-r 0: runs nothing" test ! -e "$tmp/ran"

# run-tests.sh stops at its arguments: nothing installed, built or run.
out=$("$run_tests" --only unit,bogus 2>&1 </dev/null); rc=$?
check "--only bogus: refused" test "$rc" -eq 2
check "--only bogus: names it and the steps" has "$out" "^run-tests\.sh: --only: no step 'bogus' \(the steps: unit, fuzz, sanitize, packages, cluster, 24\.11, 26\.05\)$"
check "--only bogus: one line" test "$(wc -l <<<"$out")" -eq 1
out=$("$run_tests" --only 2>&1 </dev/null); rc=$?
check "--only without a step: refused" test "$rc" -eq 2
check "--only without a step: says so" has "$out" '^run-tests\.sh: --only needs a step'
out=$("$run_tests" --fast 2>&1 </dev/null); rc=$?
check "unknown argument: refused" test "$rc" -eq 2
check "unknown argument: named" has "$out" "^run-tests\.sh: unknown argument '--fast'"

out=$("$run_tests" --help 2>&1 </dev/null); rc=$?
check "--help: exit status" test "$rc" -eq 0
check "--help: lists the steps" has "$out" '^--only runs .* unit, fuzz, sanitize, packages,$'
check "--help: to the last step" has "$out" '^cluster \(Slurm 22\.05\), 24\.11, 26\.05;'

echo "$passed passed, $failed failed"
((failed == 0))
