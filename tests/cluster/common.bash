# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Helpers for Slipway's cluster integration tests, sourced by tests/cluster/run.bash
# before each test_*.bash file.
#
# A test is a function test_NAME in a file tests/cluster/test_FEATURE.bash; it
# runs in its own subshell under `set -euo pipefail` and fails at the first
# failed assert_* (or any failed command). Optional hooks in the file:
# setup_file / teardown_file (once per file), setup / teardown (per test).
#
#   run_job CMD...       CMD as the job user in the sandbox, under `timeout`
#   run_root CMD...      the same as root;  run_host CMD...  on the host itself
# All three set $status, $output and the array $lines and return 0, like bats'
# `run`; when CMD fails they log the command, its status and its output (shown
# by the runner only if the test fails). Then assert on them:
#   assert_success | assert_failure [STATUS] | assert_output TEXT
#   assert_output_contains TEXT | assert_output_not_contains TEXT
#   assert_output_matches REGEX | assert_line_count N | assert_equal EXPECTED ACTUAL [WHAT]
#   assert_less SECONDS_A SECONDS_B [WHAT] | assert_file_exists PATH | assert_no_file PATH
#   fail MESSAGE | skip REASON

[[ -n ${SLIPWAY_TEST_COMMON_LOADED:-} ]] && return 0
SLIPWAY_TEST_COMMON_LOADED=1

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly REPO_DIR
readonly SANDBOX=${SLIPWAY_SANDBOX:-$REPO_DIR/contrib/sandbox/slipway-sandbox}
_instance=${SLIPWAY_SANDBOX_INSTANCE:-0}
if ((_instance == 0)); then
    readonly SANDBOX_DIR=${SLIPWAY_SANDBOX_DIR:-/var/lib/slipway-sandbox}
else
    readonly SANDBOX_DIR=${SLIPWAY_SANDBOX_DIR:-/var/lib/slipway-sandbox-$_instance}
fi
# The sandbox's network: the host (controller, registry) is $SANDBOX_NET.1, node i is .1i, in
# network namespace ${SANDBOX_NETNS_PREFIX}i.
readonly SANDBOX_NET=10.77.$_instance
if ((_instance == 0)); then readonly SANDBOX_NETNS_PREFIX=slw-node; else readonly SANDBOX_NETNS_PREFIX=slw$_instance-node; fi

# Pids of processes named NAME running on this sandbox's nodes (not another instance's).
sandbox_pids() {
    local pid
    for pid in $(pgrep -x "$1"); do
        [[ $(ip netns identify "$pid" 2>/dev/null) == "$SANDBOX_NETNS_PREFIX"* ]] && echo "$pid"
    done
    return 0
}
# Seconds a job may run before `timeout` kills it: nothing may hang a test.
JOB_TIMEOUT=${SLIPWAY_JOB_TIMEOUT:-60}
readonly SKIP_STATUS=77          # exit status of a skipped test (as in automake)

# ------------------------------------------------------------------ running --

# _run CMD...: run CMD, capture status, output and lines; log it if it failed.
_run() {
    local restore_e=0
    [[ $- == *e* ]] && restore_e=1
    set +e
    output=$("$@" 2>&1)
    status=$?
    ((restore_e)) && set -e
    mapfile -t lines <<<"$output"
    [[ -n $output ]] || lines=()
    if ((status != 0)); then
        printf '# command: %s\n# status:  %s\n# output:\n%s\n' "$*" "$status" "$(sed 's/^/#   /' <<<"$output")" >&2
    fi
    return 0
}

# Slurm 22.05's slurmstepd is the job user, process-wide, while it sets up a step's I/O and forks
# its tasks; a PMIx peer that connects to it then is refused by munge, and the step's fence waits
# until its timeout (docs/platform.md, "PMIx"). That is Slurm's race, not ours: a step that failed
# with this line in its output runs once more, and run.bash's summary counts such steps.
readonly SLURM_MUNGE_WINDOW='Munge decode failed: Unauthorized credential for client'

# Open MPI 5.0's race in MPI_Init (open-mpi/ompi#12495): a message from a peer that left the
# PMIx fence first reaches pml/ob1 before MPI_COMM_WORLD exists there, and the rank dies of a
# segfault at address 0xe0. Seen a few times a run with Debian 13's Open MPI 5.0.7 under srun, with
# and without containers (docs/platform.md); Open MPI's, not ours, and so treated as the munge window.
readonly OMPI5_INIT_RACE='mca_pml_ob1_recv_frag_callback_match'

# slurm_window_hit TEXT: true if TEXT shows one of those upstream races; then notes it for run.bash.
slurm_window_hit() {
    if grep -q "$SLURM_MUNGE_WINDOW" <<<"$1"; then
        echo "# Slurm's munge window refused a PMIx peer (docs/platform.md, PMIx): running the step once more" >&2
    elif grep -q "$OMPI5_INIT_RACE" <<<"$1" && grep -q 'Segmentation fault' <<<"$1"; then
        echo "# Open MPI 5's MPI_Init race (open-mpi/ompi#12495, docs/platform.md): running the step once more" >&2
    else
        return 1
    fi
    [[ -z ${TALLY:-} ]] || echo "${SLIPWAY_TEST:-?}" >>"$TALLY.slurm-window"
}

run_job() {
    _run "$SANDBOX" exec -- timeout "$JOB_TIMEOUT" "$@"
    if ((status != 0)) && slurm_window_hit "$output"; then
        _run "$SANDBOX" exec -- timeout "$JOB_TIMEOUT" "$@"
    fi
}
run_root() { _run "$SANDBOX" exec --root -- timeout "$JOB_TIMEOUT" "$@"; }
run_host() { _run timeout "$JOB_TIMEOUT" "$@"; }

# Submit a batch script (made the job user's, as a user's own script is) and wait for it by
# polling every 0.2 s (`sbatch --wait` polls at 2 s, then 10 s). Sets $status
# to the job's exit code and $output to its stdout+stderr file. A job that
# failed on Slurm's munge window (a multi-node PMIx step in it) runs once more,
# as run_job's steps do.
run_batch() {
    _run_batch_once "$@"
    if ((status != 0)) && slurm_window_hit "$output"; then
        _run_batch_once "$@"
    fi
}

_run_batch_once() {
    local script=$1 out jobid state code i
    shift
    chown slwuser "$script"
    out=$(job_user_home)/slurm-batch-$$-$RANDOM.out
    run_job sbatch --parsable -o "$out" "$@" "$script"
    ((status == 0)) || return 0
    jobid=${output%%;*}
    for ((i = 0; i < JOB_TIMEOUT * 5; i++)); do
        state=$(job_field "$jobid" JobState)
        [[ $state =~ ^(PENDING|CONFIGURING|RUNNING|COMPLETING|)$ ]] || break
        sleep 0.2
    done
    code=$(job_field "$jobid" ExitCode)
    _run cat "$out"
    rm -f "$out"
    status=${code%%:*}
    if [[ $state =~ ^(PENDING|CONFIGURING|RUNNING|COMPLETING|)$ ]]; then
        "$SANDBOX" exec -- scancel "$jobid" || true
        echo "# batch job $jobid still $state after ${JOB_TIMEOUT}s: cancelled" >&2
        status=124
    elif [[ $state != COMPLETED && ${status:-0} -eq 0 ]]; then
        status=1
    fi
}

# One field of `scontrol show job`, e.g. job_field 12 JobState.
job_field() {
    "$SANDBOX" exec -- scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"
}

job_user_home() { getent passwd slwuser | cut -d: -f6; }

# selected REGEX: true when a test this run of the file will run (run.bash's -k and -x applied)
# has a name matching REGEX; for setup_file, to prepare only what those tests use. Every test
# when the file is sourced by something other than run.bash.
selected() {
    [[ -v SELECTED_TESTS ]] || return 0
    tr ' ' '\n' <<<"$SELECTED_TESTS" | grep -qE -- "$1"
}

# ---------------------------------------------------------------- sandbox --

sandbox_is_up() {
    local report
    report=$("$SANDBOX" status 2>/dev/null) || return 1
    [[ $report =~ (^|$'\n')slurmctld\ +running ]]
}

# Bring the sandbox up (idempotent, fast when it is up already).
require_sandbox() { "$SANDBOX" up >/dev/null 2>&1 || fail "slipway-sandbox up failed; see $SANDBOX_DIR/log"; }

# Build (cached) and push test images; require_images busybox layers
require_images() { "$SANDBOX" images "$@" >/dev/null 2>&1 || fail "slipway-sandbox images $* failed"; }

image_ref() { "$SANDBOX" image "$1"; }

# Whether the plugin is installed in plugstack.conf. Tests of it skip otherwise, except under
# contrib/run-tests.sh (SLIPWAY_REQUIRE_PLUGIN=1), where a missing plugin is a failure.
require_plugin() {
    grep -q '^required' "$SANDBOX_DIR/etc/plugstack.conf" 2>/dev/null && return 0
    local why="spank_slipway.so is not in plugstack.conf (build it, then slipway-sandbox up)"
    [[ ${SLIPWAY_REQUIRE_PLUGIN:-0} == 1 ]] && fail "$why"
    skip "$why"
}

# --------------------------------------------------------------- asserting --

# A failed check after a command that succeeded shows that command's last output lines too (one
# that failed was shown by _run), so a count that came out wrong in CI says what it counted.
fail() {
    echo "FAILED: $*" >&2
    if [[ ${status:-1} == 0 && -n ${output:-} ]]; then
        echo "# the last command's output (its last 40 lines):" >&2
        tail -n 40 <<<"$output" | sed 's/^/#   /' >&2
    fi
    exit 1
}

skip() {
    echo "SKIPPED: $*" >&2
    exit "$SKIP_STATUS"
}

assert_success() {
    ((status == 0)) || fail "expected success, got status $status"
}

assert_failure() {
    if (($# == 0)); then
        ((status != 0)) || fail "expected a failure, got status 0"
    else
        ((status == $1)) || fail "expected status $1, got $status"
    fi
}

assert_equal() {
    [[ $1 == "$2" ]] || fail "${3:-value}: expected '$1', got '$2'"
}

assert_output() {
    [[ $output == "$1" ]] || fail "expected output:"$'\n'"$1"$'\n'"got:"$'\n'"$output"
}

assert_output_contains() {
    [[ $output == *"$1"* ]] || fail "output does not contain '$1':"$'\n'"$output"
}

assert_output_not_contains() {
    [[ $output != *"$1"* ]] || fail "output contains '$1':"$'\n'"$output"
}

assert_output_matches() {
    [[ $output =~ $1 ]] || fail "output does not match /$1/:"$'\n'"$output"
}

assert_line_count() {
    ((${#lines[@]} == $1)) || fail "expected $1 lines, got ${#lines[@]}:"$'\n'"$output"
}

# assert_less A B [WHAT]: decimal numbers, e.g. durations in seconds.
assert_less() {
    awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }' || fail "${3:-value} $1 is not below $2"
}

# assert_trains_alike ONE EIGHT DIFF TOLERANCE: one process and 8 ranks trained alike
# (test_libtrain, test_torch, in float64: each says why the tolerances hold): DIFF, the largest
# difference between their weights, is within TOLERANCE, their final accuracies ONE and EIGHT are
# within 0.001, and ONE is real training (> 0.7).
assert_trains_alike() {
    [[ -n $1 && -n $2 ]] || fail "no final accuracy (one process: '$1', 8 ranks: '$2')"
    [[ -n $3 ]] || fail "no weights difference printed"
    awk -v d="$3" -v t="$4" 'BEGIN { exit !(d <= t) }' \
        || fail "the weights of 8 ranks and of one process differ by $3, more than the summation order allows ($4)"
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(d <= 0.001 && d >= -0.001) }' \
        || fail "8 ranks reached $2, one process $1: more than 0.001 apart"
    assert_less 0.7 "$1" "accuracy of one process"
}

assert_file_exists() { [[ -e $1 ]] || fail "$1 does not exist"; }
assert_no_file() { [[ ! -e $1 ]] || fail "$1 exists"; }

# Seconds since the epoch with milliseconds, for timing: t0=$(now); ...; elapsed $t0
now() { date +%s.%N; }

# A docker-registry configuration serving STORAGE on ADDR (host:port), logging every request, with
# EXTRA (YAML sections: auth, proxy) after it. Tests that run a registry of their own use it.
registry_config() {
    cat <<REGISTRY_CONFIG
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $2
http:
  addr: $1
${3:-}
REGISTRY_CONFIG
}
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# wait_until SECONDS CMD...: poll CMD every 0.1 s; false if it never held.
wait_until() {
    local deadline
    deadline=$(awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.3f", a + b }')
    shift
    until "$@"; do
        awk -v a="$(now)" -v b="$deadline" 'BEGIN { exit !(a > b) }' && return 1
        sleep 0.1
    done
}
