# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# DL environment (issue 5): every task of a containerized step gets RANK, LOCAL_RANK, WORLD_SIZE,
# LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR (the step's first node) and MASTER_PORT (the same for
# every task of a step, in the site's range), on 4 nodes x 2 tasks.
source "$(dirname "${BASH_SOURCE[0]}")/dl_common.bash"

setup_file() {
    dl_require_sandbox
    require_images busybox
    BUSYBOX=$(image_ref busybox)
}

readonly PROBE='echo "dl rank=$RANK slurm=$SLURM_PROCID local=$LOCAL_RANK/$SLURM_LOCALID world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE node=$NODE_RANK/$SLURM_NODEID host=$(hostname) master=$MASTER_ADDR:$MASTER_PORT"'

test_dl_variables_on_4_nodes_x_2_tasks() {
    run_job srun -N4 --ntasks-per-node=2 -K --container-image="$BUSYBOX" sh -c "$PROBE"
    assert_success
    local got line port
    got=$(task_lines "dl ")
    assert_equal 8 "$(wc -l <<<"$got")" "tasks"
    port=$(sed -n 's/.*master=node1:\([0-9]*\)$/\1/p' <<<"$got" | sort -u)
    [[ $port =~ ^[0-9]+$ ]] || fail "tasks disagree on MASTER_PORT or MASTER_ADDR is not node1:"$'\n'"$got"
    ((port >= 29500 && port <= 29999)) || fail "MASTER_PORT $port outside 29500-29999"
    while read -r line; do
        [[ $line =~ rank=([0-9])\ slurm=([0-9])\ local=([0-9])/([0-9])\ world=8\ lws=2\ node=([0-9])/([0-9])\ host=node([0-9]) ]] ||
            fail "bad DL variables: $line"
        assert_equal "${BASH_REMATCH[2]}" "${BASH_REMATCH[1]}" "RANK"
        assert_equal "${BASH_REMATCH[4]}" "${BASH_REMATCH[3]}" "LOCAL_RANK"
        assert_equal "${BASH_REMATCH[6]}" "${BASH_REMATCH[5]}" "NODE_RANK"
        assert_equal "$((BASH_REMATCH[7] - 1))" "${BASH_REMATCH[5]}" "node of NODE_RANK"
    done <<<"$got"
}

test_master_port_is_per_step_and_the_job_may_set_its_own() {
    run_job srun -N2 -n2 -K --container-image="$BUSYBOX" sh -c 'echo "p=$MASTER_PORT"'
    assert_success
    assert_equal 1 "$(task_lines p= | sort -u | wc -l)" "distinct ports in one step"
    run_job env MASTER_PORT=12345 MASTER_ADDR=elsewhere srun -N2 -n2 -K \
        --container-image="$BUSYBOX" sh -c 'echo "m=$MASTER_ADDR:$MASTER_PORT r=$RANK"'
    assert_success
    assert_equal "m=elsewhere:12345 r=0"$'\n'"m=elsewhere:12345 r=1" "$(task_lines m=)"
}
