# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# libtrain on the sandbox (issue 6), in the `demo` image: the Python and C++ Fashion-MNIST
# trainers on 8 ranks over 4 nodes (srun --mpi=pmix, PMIx bootstrap, shared memory in the node,
# TCP across) reach the weights and accuracy of one process with the same global batch and
# epochs; a rank
# killed mid-run (by itself, or with kill -9 from outside) or stopped makes every other rank fail
# with a clear libtrain error within LIBTRAIN_TIMEOUT, and srun fails: never a hang.
# Sizes are small (a 10k-20k sample subset, 2 epochs) to keep the file near a minute.

readonly TRAIN_PY=/usr/share/libtrain/examples/train.py
readonly TRAIN_CC=/usr/libexec/libtrain/libtrain_train_mlp
readonly PY_ARGS="--epochs 2 --limit 10000"
readonly CC_ARGS="--epochs 2 --limit 20000 --lr 0.1"
# 8 ranks and one process train on the same global batches from the same initial weights; they
# differ only in the order of each averaged gradient's sums. The comparisons train in float64
# (--dtype float64), where that difference is ~1e-16 a step: measured with these arguments on
# one host (env bootstrap), the weights ended 1.4e-15 (train.py) and 5.3e-16 (train_mlp) apart,
# against 2.6e-6 and 2.7e-7 in float32 (train.py's momentum 0.9 amplifies more; PyTorch's MLP
# in test_torch.bash went 0.098 apart in float32). So the weights must agree within 1e-9, six
# orders of magnitude above float64's measured difference, and then the accuracies on the
# 10000 test samples within 0.001 (a sample changes class only if its two top scores are
# within ~1e-9 of each other).
readonly COMPARE_ARGS="--dtype float64" WEIGHTS_TOLERANCE=1e-9
# Failure tests: a short timeout, so that a missed failure shows up as a slow test, not a hang.
readonly FAIL_TIMEOUT=15

setup_file() {
    require_sandbox
    require_plugin
    "$SANDBOX" images demo >/dev/null 2>&1 || fail "slipway-sandbox images demo failed (run it to see why)"
    DEMO=$(image_ref demo)
    JOB_TIMEOUT=90
    # The trained weights, bound into the container at /ckpt.
    CKPT_DIR=$(job_user_home)/libtrain-test
    install -d -m 0755 -o slwuser "$CKPT_DIR"
}

teardown_file() { rm -rf "$CKPT_DIR"; }

# The number after "final test accuracy" in $output.
final_accuracy() {
    sed -n 's/^final test accuracy \([0-9.]*\) .*/\1/p' <<<"$output"
}

# The largest difference between the weights in files A and B (in $CKPT_DIR): train.py's
# checkpoints (.npz) or train_mlp's --save (raw float64).
readonly WEIGHTS_DIFF_PY='import sys, numpy as np
def weights(name):
    if name.endswith(".npz"):
        with np.load("/ckpt/" + name) as d:
            return np.concatenate([d[k].ravel() for k in sorted(d.files)])
    return np.fromfile("/ckpt/" + name, dtype=np.float64)
a, b = (weights(n) for n in sys.argv[1:3])
assert a.size == b.size and a.size > 100000, (a.size, b.size)
print("weights differ by at most %.3e" % np.abs(a - b).max())'

# assert_same_training A B: the weights in files A and B, and the accuracies SINGLE and MULTI,
# agree (assert_trains_alike, within WEIGHTS_TOLERANCE).
assert_same_training() {
    local diff
    run_job srun -N1 -n1 -K --container-image="$DEMO" --container-mounts="$CKPT_DIR:/ckpt" \
        python3 -c "$WEIGHTS_DIFF_PY" "$1" "$2"
    assert_success
    diff=$(sed -n 's/^weights differ by at most //p' <<<"$output")
    echo "# weights differ by at most $diff" >&2
    assert_trains_alike "$SINGLE" "$MULTI" "$diff" "$WEIGHTS_TOLERANCE"
}

# train_both SAVE_OPTION NAME CMD...: CMD SAVE_OPTION /ckpt/NAME-1.* in the demo image as 1
# process on one node, then with /ckpt/NAME-8.* as 8 ranks on 4 nodes (the suffix is NAME's);
# sets SINGLE and MULTI to their final accuracies.
train_both() {
    local save=$1 name=$2 ext=${2##*.}
    shift 2
    rm -f "$CKPT_DIR/${name%.*}"-[18]."$ext"
    # LIBTRAIN_TIMEOUT: a wire-up that stalls fails in libtrain, well before JOB_TIMEOUT.
    run_job env LIBTRAIN_TIMEOUT=30 srun -N1 -n1 -K --container-image="$DEMO" --container-mounts="$CKPT_DIR:/ckpt" \
        "$@" "$save" "/ckpt/${name%.*}-1.$ext"
    assert_success
    assert_output_contains "training on 1 ranks"
    SINGLE=$(final_accuracy)
    run_job env LIBTRAIN_TIMEOUT=30 srun --mpi=pmix -N4 --ntasks-per-node=2 -K --container-image="$DEMO" \
        --container-mounts="$CKPT_DIR:/ckpt" "$@" "$save" "/ckpt/${name%.*}-8.$ext"
    assert_success
    assert_output_contains "training on 8 ranks (pmix bootstrap, 2 on this node)"
    MULTI=$(final_accuracy)
    echo "# one process: $SINGLE, 8 ranks: $MULTI" >&2
}

# Every rank but the dead one ($2) reported a libtrain error naming the dead rank and its node
# (-N4 --ntasks-per-node=2 puts ranks 2i and 2i+1 on node i+1), whichever rank saw it first, and
# one of them is a $1.
assert_others_failed_with() {
    local kind=$1 dead=$2 r culprit
    culprit="rank $dead on node node$((dead / 2 + 1)) "
    for r in 0 1 2 3 4 5 6 7; do
        ((r == dead)) && continue
        grep -Eq "^train(\.py|_mlp): rank $r: [A-Za-z]+Error: libtrain: .*$culprit" <<<"$output" \
            || fail "rank $r reported no libtrain error naming '$culprit':"$'\n'"$output"
    done
    assert_output_contains "$kind: libtrain: "
}

test_python_trainer_on_8_ranks_matches_one_process() {
    # shellcheck disable=SC2086
    train_both --checkpoint py.npz python3 "$TRAIN_PY" $PY_ARGS $COMPARE_ARGS
    assert_same_training py-1.npz py-8.npz
}

test_cpp_trainer_on_8_ranks_matches_one_process() {
    # shellcheck disable=SC2086
    train_both --save cc.bin "$TRAIN_CC" $CC_ARGS $COMPARE_ARGS
    assert_same_training cc-1.bin cc-8.bin
}

# The issue's exact line: -n8 lets Slurm place the ranks (here 5+1+1+1), still one communicator.
test_quickstart_line_trains() {
    # shellcheck disable=SC2086
    run_job srun --mpi=pmix -N4 -n8 -K --container-image="$DEMO" python3 "$TRAIN_PY" --epochs 1 --limit 5000
    assert_success
    assert_output_matches "final test accuracy 0\.[0-9]+ after 1 epochs on 8 ranks"
}

# A rank that SIGKILLs itself at step 5. No -K: srun must not be what stops the others.
test_rank_that_dies_makes_every_rank_fail_fast() {
    local t0
    t0=$(now)
    # shellcheck disable=SC2086
    run_job env LIBTRAIN_TIMEOUT=$FAIL_TIMEOUT srun --kill-on-bad-exit=0 --mpi=pmix -N4 --ntasks-per-node=2 \
        --container-image="$DEMO" python3 "$TRAIN_PY" $PY_ARGS --die-rank 5 --die-step 5
    assert_failure
    assert_less "$(elapsed "$t0")" $FAIL_TIMEOUT "seconds until srun returned"
    assert_output_contains "rank 5: killing myself"
    assert_others_failed_with PeerError 5
    assert_output_contains "rank 5 on node node3 (local rank 1) died during a collective (pid "
}

# The pid (as the host sees it: the nodes share its pid namespace) of the task with
# SLURM_PROCID=$1 whose command is $2, or nothing.
task_pid() {
    local dir
    for dir in /proc/[0-9]*; do
        [[ $(tr '\0' '\n' <"$dir/cmdline" 2>/dev/null | head -n1) == "$2" ]] || continue
        tr '\0' '\n' <"$dir/environ" 2>/dev/null | grep -qx "SLURM_PROCID=$1" && { echo "${dir#/proc/}"; return; }
    done
}

# start_trainer OUTFILE LIBTRAIN_TIMEOUT KILL_ON_BAD_EXIT: the C++ trainer on 8 ranks, long
# enough to be interrupted, in the background; returns once rank 0 finished an epoch. Sets
# TRAINER_PID (the `slipway-sandbox exec` running srun; its status lands in OUTFILE.rc). A start
# that Slurm's munge window stalled (common.bash) is cancelled and made once more.
start_trainer() {
    local out=$1 timeout=$2 kill_on_bad_exit=$3 attempt i
    for attempt in 1 2; do
        ( "$SANDBOX" exec -- env LIBTRAIN_TIMEOUT="$timeout" timeout "$JOB_TIMEOUT" \
            srun --kill-on-bad-exit="$kill_on_bad_exit" --mpi=pmix -N4 --ntasks-per-node=2 \
            --container-image="$DEMO" "$TRAIN_CC" --epochs 100 --limit 10000 >"$out" 2>&1
          echo $? >"$out.rc" ) &
        TRAINER_PID=$!
        for ((i = 0; i < 300; i++)); do
            grep -q "^epoch 1:" "$out" 2>/dev/null && return 0
            sleep 0.1
        done
        ((attempt == 1)) && slurm_window_hit "$(cat "$out")" || break
        teardown
    done
    cat "$out" >&2
    fail "the trainer did not finish its first epoch within 30 s"
}

# A trainer that start_trainer left running (the test failed before wait_trainer) is cancelled
# here, so that it cannot hold the nodes or be mistaken for the next test's ranks.
teardown() {
    [[ -n ${TRAINER_PID:-} ]] && kill -0 "$TRAINER_PID" 2>/dev/null || return 0
    "$SANDBOX" exec -- scancel -u slwuser || true
    wait "$TRAINER_PID" || true
}

# wait_trainer OUTFILE: waits for it; sets $status and $output like run_job.
wait_trainer() {
    wait "$TRAINER_PID" || true
    status=$(cat "$1.rc")
    output=$(cat "$1")
    rm -f "$1" "$1.rc"
    echo "# status $status, output:"$'\n'"$output" >&2
}

test_rank_killed_from_outside_makes_every_rank_fail_fast() {
    local out pid t0
    out=$(mktemp)
    start_trainer "$out" $FAIL_TIMEOUT 0
    pid=$(task_pid 6 "$TRAIN_CC")
    [[ -n $pid ]] || fail "no process of rank 6 found"
    t0=$(now)
    kill -9 "$pid"
    wait_trainer "$out"
    assert_failure
    assert_less "$(elapsed "$t0")" $FAIL_TIMEOUT "seconds from kill -9 until srun returned"
    assert_others_failed_with PeerError 6
}

# A stopped rank is alive but silent: only LIBTRAIN_TIMEOUT can tell. Then -K kills it.
test_stopped_rank_makes_every_rank_time_out() {
    local out pid t0
    out=$(mktemp)
    start_trainer "$out" 5 1
    pid=$(task_pid 3 "$TRAIN_CC")
    [[ -n $pid ]] || fail "no process of rank 3 found"
    t0=$(now)
    kill -STOP "$pid"
    wait_trainer "$out"
    kill -CONT "$pid" 2>/dev/null || true
    assert_failure
    assert_less "$(elapsed "$t0")" 20 "seconds from SIGSTOP until srun returned"
    assert_output_contains "TimeoutError: libtrain: "
    assert_output_contains "rank 3 on node node2 (local rank 1) did not reach the collective"
}
