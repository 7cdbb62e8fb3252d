# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# LIBTRAIN_HOROVOD=1 (issue 26, item 5): a script written for Horovod (programs/horovod_style.py:
# `import horovod.torch as hvd`, the API surface Horovod's PyTorch examples use) runs unchanged
# in the `torch` image on 4 nodes x 2 tasks, through the plugin, `slipway run` and `#SBATCH`,
# and ends with identical weights on all 8 ranks; without the variable `import horovod` fails.

readonly EIGHT="-N4 --ntasks-per-node=2"

setup_file() {
    require_sandbox
    require_plugin
    "$SANDBOX" images torch >/dev/null 2>&1 || fail "slipway-sandbox images torch failed (run it to see why)"
    TORCH=$(image_ref torch)
    local bin=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}/launcher/slipway
    [[ -x $bin ]] || fail "slipway is not built ($bin)"
    # The nodes see the job user's home, not the host's /tmp: the script and slipway go there.
    install -m 0755 -o slwuser "$bin" "$(job_user_home)/slipway"
    SCRIPT_DIR=$(job_user_home)/horovod-opt-in
    install -d -m 0755 -o slwuser "$SCRIPT_DIR"
    install -m 0644 -o slwuser "$REPO_DIR/tests/cluster/programs/horovod_style.py" "$SCRIPT_DIR/"
    export SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000
    JOB_TIMEOUT=300  # the first start imports the image on every node
    run_job srun -N4 --ntasks-per-node=1 -K --container-image="$TORCH" true
    ((status == 0)) || fail "the torch image does not start: $output"
    JOB_TIMEOUT=180
}

teardown_file() { rm -rf "$(job_user_home)/slipway" "$SCRIPT_DIR"; }

# Every one of the 8 ranks printed its 'ok' line: identical weights, a falling loss, and Adasum
# refused in one line.
assert_eight_ranks_ok() {
    local r
    for r in 0 1 2 3 4 5 6 7; do
        assert_output_matches "rank $r/8: ok: weights identical on 8 ranks, loss .*adasum: libtrain.torch: op=Adasum is not implemented"
    done
    assert_output_contains "rank 0/8: horovod 0.28.1+libtrain, local rank 0/2, node 0/4"
    assert_output_not_contains "LIBTRAIN_HOROVOD=1 ignored"
}

test_horovod_script_unchanged_through_the_plugin() {
    run_job env LIBTRAIN_HOROVOD=1 LIBTRAIN_TIMEOUT=30 srun --mpi=pmix $EIGHT -K \
        --container-image="$TORCH" --container-mounts="$SCRIPT_DIR:/hvd" \
        python3 /hvd/horovod_style.py --fp16-allreduce
    assert_success
    assert_eight_ranks_ok
}

test_horovod_script_unchanged_through_slipway_run() {
    run_job env LIBTRAIN_HOROVOD=1 LIBTRAIN_TIMEOUT=30 srun --mpi=pmix $EIGHT -K \
        ./slipway run --container-image="$TORCH" --container-mounts="$SCRIPT_DIR:/hvd" -- \
        python3 /hvd/horovod_style.py
    assert_success
    assert_eight_ranks_ok
}

test_horovod_script_unchanged_from_sbatch() {
    local script=$SCRIPT_DIR/job.sh
    printf '#!/bin/bash\n#SBATCH %s --time=5\n#SBATCH --container-image=%s\n#SBATCH --container-mounts=%s:/hvd\nexport LIBTRAIN_HOROVOD=1 LIBTRAIN_TIMEOUT=30\nsrun --mpi=pmix -K python3 /hvd/horovod_style.py\n' \
        "$EIGHT" "$TORCH" "$SCRIPT_DIR" >"$script"
    run_batch "$script"
    assert_success
    assert_eight_ranks_ok
}

test_without_the_opt_in_import_horovod_fails() {
    run_job srun $EIGHT --container-image="$TORCH" --container-mounts="$SCRIPT_DIR:/hvd" \
        python3 /hvd/horovod_style.py
    assert_failure
    assert_output_contains "ModuleNotFoundError: No module named 'horovod'"
    assert_output_not_contains ": ok: "
}
