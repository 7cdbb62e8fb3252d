#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Run Slipway's cluster integration tests: run.bash [-k REGEX] [-x REGEX] [-r N] FILE...
#
# Each FILE (tests/cluster/test_*.bash) defines functions test_*; they run in
# file order, each in its own subshell under `set -euo pipefail`, after
# common.bash and the file are sourced. Prints `setup FILE` with setup_file's
# time, `ok`, `FAIL` or `skip` per test (with the test's log when it fails or
# skips), then `N passed, N failed, N skipped`; exits non-zero if any test
# failed. -k runs only the tests whose name matches (-f is the same); -x leaves
# out those whose FILE:NAME (test_x.bash:test_y) does; -r runs each test N
# times in a row (each run counted), after one setup_file. A file with no test
# left to run is not set up.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HERE
passed=0 failed=0 skipped=0
filter=.
exclude=
repeat=1

# The test functions of a file, in the order they are written, less those -x leaves out.
list_tests() {
    local name file
    file=$(basename "$1")
    for name in $(sed -n 's/^\(function[[:space:]]\+\)\{0,1\}\(test_[A-Za-z0-9_]*\)[[:space:]]*().*/\2/p' "$1" |
        grep -E -- "$filter"); do
        [[ -n $exclude ]] && grep -qE -- "$exclude" <<<"$file:$name" || echo "$name"
    done
}

# Run one test in a subshell; its output goes to LOG. Returns its status.
run_one() {
    local name=$1 log=$2
    (
        set -euo pipefail
        export SLIPWAY_TEST=$name
        if declare -F setup >/dev/null; then setup; fi
        trap 'if declare -F teardown >/dev/null; then teardown; fi' EXIT
        "$name"
    ) >"$log" 2>&1
}

seconds_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

report() {               # report WORD NAME SECONDS [LOG]
    printf '%-4s %s (%ss)\n' "$1" "$2" "$3"
    [[ -z ${4:-} ]] || sed 's/^/     | /' "$4"
}

# Run every test of one file, in a subshell so files do not see each other.
run_file() {
    local file=$1 name log rc t0
    (
        source "$HERE/common.bash"
        # shellcheck source=/dev/null
        source "$file"
        echo "# $(basename "$file")"
        # The tests to run, for setup_file (common.bash's `selected`): a file none of whose tests
        # is chosen is not set up at all.
        SELECTED_TESTS=$(list_tests "$file" | paste -sd' ')
        [[ -n $SELECTED_TESTS ]] || exit 0
        t0=$(date +%s.%N)
        if declare -F setup_file >/dev/null; then
            setup_file || { echo "FAIL setup_file of $file: skipping its tests"; exit 1; }
            report setup "$(basename "$file")" "$(seconds_since "$t0")"
        fi
        log=$(mktemp)
        for name in $(tr ' ' '\n' <<<"$SELECTED_TESTS" | awk -v n="$repeat" '{ for (i = 0; i < n; i++) print }'); do
            t0=$(date +%s.%N)
            run_one "$name" "$log"
            rc=$?
            secs=$(seconds_since "$t0")
            case $rc in
                0) report ok "$name" "$secs"; echo pass >>"$TALLY" ;;
                "$SKIP_STATUS") report skip "$name" "$secs" "$log"; echo skip >>"$TALLY" ;;
                *) report FAIL "$name" "$secs" "$log"; echo fail >>"$TALLY" ;;
            esac
        done
        rm -f "$log"
        if declare -F teardown_file >/dev/null; then teardown_file || echo "warning: teardown_file of $file failed"; fi
    )
}

main() {
    while [[ ${1:-} == -[fkxr] && $# -ge 2 ]]; do
        case $1 in -f | -k) filter=$2 ;; -x) exclude=$2 ;; -r) repeat=$2 ;; esac
        shift 2
    done
    [[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "run.bash: -r $repeat: not a count of runs (1 or more)"; exit 2; }
    [[ $# -gt 0 && $1 != -h && $1 != --help ]] || { sed -n '4,14s/^# \{0,1\}//p' "$0"; exit 2; }
    TALLY=$(mktemp)
    export TALLY
    local file
    for file in "$@"; do
        [[ -f $file ]] || { echo "no such test file: $file"; echo fail >>"$TALLY"; continue; }
        run_file "$(readlink -f "$file")" || echo fail >>"$TALLY"
    done
    passed=$(grep -c pass "$TALLY") failed=$(grep -c fail "$TALLY") skipped=$(grep -c skip "$TALLY")
    if [[ -s $TALLY.slurm-window ]]; then
        echo "note: $(wc -l <"$TALLY.slurm-window") step(s) ran twice after Slurm's munge window refused" \
            "a PMIx peer or Open MPI 5's MPI_Init race struck (docs/platform.md): $(sort -u "$TALLY.slurm-window" | tr '\n' ' ')"
    fi
    rm -f "$TALLY" "$TALLY.slurm-window"
    echo "$passed passed, $failed failed, $skipped skipped"
    ((failed == 0))
}

main "$@"
