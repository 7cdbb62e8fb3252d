# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --dl-explain (issue 5): each task prints what it would get and why, for the sandbox's known
# state (no GPUs, the host's OpenMPI in set 'mpi'), and nothing of the command runs.
source "$(dirname "${BASH_SOURCE[0]}")/dl_common.bash"

setup_file() {
    dl_require_sandbox
    require_images debian-python mpich-abi
    DEBIAN_PYTHON=$(image_ref debian-python)
    MPICH_ABI=$(image_ref mpich-abi)
}

test_explain_prints_every_task_and_runs_nothing() {
    local marker=/tmp/slipway-explain-ran-$$
    run_job srun -N2 -w node[1-2] --ntasks-per-node=2 -K --container-image="$DEBIAN_PYTHON" --dl-host-libs=mpi \
        --dl-gpus=none --dl-explain sh -c "touch $marker; exit 3"
    assert_success
    local r
    for r in 0 1 2 3; do
        assert_output_contains "slipway-explain: task $r: rank $r of 4, local rank $((r % 2)) of 2 on node$((r / 2 + 1)) (node rank $((r / 2))); nothing is run"
        assert_output_contains "slipway-explain: task $r: env RANK=$r: SLURM_PROCID"
        assert_output_contains "slipway-explain: task $r: env MASTER_ADDR=node1 (unless the job sets it)"
        assert_output_contains "slipway-explain: task $r: env LD_LIBRARY_PATH=/opt/slipway/hostlibs"
        assert_output_contains "slipway-explain: task $r: gpus none of all 0 GPUs of the node (no GRES)"
        assert_output_contains "slipway-explain: task $r: inject libmpi.so.40 from /usr/lib/x86_64-linux-gnu/libmpi.so.40."
        # libopen-pal.so.40 in OpenMPI 4.1 (Debian 12), .80 in 5.0 (Debian 13)
        assert_output_matches "slipway-explain: task $r: inject libopen-pal\.so\.[0-9]+ from"
        assert_output_contains "slipway-explain: task $r: check ok: libmpi.so.40: host libmpi.so.40."
        assert_output_contains "slipway-explain: task $r: check ok: libc.so.6: host libraries need up to GLIBC_2."
    done
    assert_output_not_contains "would fail"
    for r in 1 2 3 4; do
        "$SANDBOX" exec -- srun -w "node$r" -N1 -n1 -K test ! -e "$marker" || fail "the command ran on node$r"
    done
}

test_explain_shows_what_would_fail() {
    run_job srun -N1 -n2 -K --container-image="$MPICH_ABI" --dl-host-libs=mpi --dl-gpus=1 \
        --dl-explain true
    assert_failure
    assert_output_contains "slipway-explain: task 0: would fail: host libmpi.so.40"
    assert_output_contains "cannot replace the image's libmpi.so.12"
    run_job srun -N1 -n2 -K --container-image="$MPICH_ABI" --dl-gpus=1 --dl-explain true
    assert_failure
    # Either task says it (with srun -K, the first task to fail may take the other down first).
    [[ $output =~ "slipway-explain: task "[01]": would fail: --dl-gpus=1: 2 tasks need 2 GPUs, but there are 0 in the step's GPUs on node"[0-9]+" (all 0 GPUs of the node (no GRES))" ]] ||
        fail "no task explains the GPU shortage:"$'\n'"$output"
}
