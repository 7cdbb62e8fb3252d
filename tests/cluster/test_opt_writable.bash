# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-writable / --container-readonly on the sandbox: a writable root is an overlay with a
# tmpfs upper that ends with the step (the cached image is never modified: test_lifecycle.bash
# compares it), shared by the tasks of a node; read-only is the default. srun, #SBATCH, salloc.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
}

test_writable_root_on_every_node() {
    run_job srun -N4 -K --container-image="$BUSYBOX" --container-writable \
        sh -c 'echo changed >/etc/slipway-image && mkdir /newdir && rm /bin/ls && cat /etc/slipway-image'
    assert_success
    assert_equal 4 "$(grep -cx changed <<<"$output")" "tasks writing the root"
}

test_writes_end_with_the_step() {
    run_job srun -N4 -K --container-image="$BUSYBOX" --container-writable sh -c 'echo changed >/etc/slipway-image; touch /newfile'
    assert_success
    run_job srun -N4 -K --container-image="$BUSYBOX" --container-writable \
        sh -c 'echo "$(cat /etc/slipway-image) $([ -e /newfile ] && echo newfile)"'
    assert_success
    assert_equal 4 "$(grep -cx 'busybox ' <<<"$output")" "tasks seeing a fresh root"
}

test_tasks_of_a_node_share_the_writable_root() {
    run_job srun -N2 --ntasks-per-node=2 -K --container-image="$BUSYBOX" --container-writable sh -c '
        if [ "$SLURM_LOCALID" = 0 ]; then echo "from $SLURM_PROCID" >/shared; exit; fi
        for i in $(seq 100); do [ -s /shared ] && break; sleep 0.05; done
        echo "task $SLURM_PROCID read $(cat /shared)"'
    assert_success
    assert_output_matches 'task (1|3) read from (0|2)'
    assert_equal 2 "$(grep -c '^task [0-9] read from [0-9]$' <<<"$output")" "tasks reading their node-mate's file"
}

test_readonly_is_the_default_and_explicit() {
    local flag
    for flag in "" --container-readonly; do
        run_job srun -N2 -K --container-image="$BUSYBOX" $flag sh -c 'touch /newfile 2>&1; echo end'
        assert_success
        assert_equal 2 "$(grep -c 'Read-only file system' <<<"$output")" "refused writes with '$flag'"
    done
}

test_sbatch_writable_and_srun_readonly() {
    local script
    script=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-writable-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-writable
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'touch /new && echo "step \$SLURM_PROCID wrote"'
srun -K --container-readonly sh -c 'touch /new2 2>/dev/null || echo "step \$SLURM_PROCID refused"'
EOS
    run_batch "$script"
    rm -f "$script"
    echo "$output" >&2
    assert_equal 2 "$(grep -c '^step [01] wrote$' <<<"$output")" "steps writing the root"
    assert_equal 2 "$(grep -c '^step [01] refused$' <<<"$output")" "steps with srun --container-readonly"
    assert_success
}

test_salloc_writable() {
    run_job salloc -N2 --time=2 --container-image="$BUSYBOX" --container-writable \
        srun -K -n2 sh -c 'touch /new && echo wrote'
    assert_success
    assert_equal 2 "$(grep -cx wrote <<<"$output")" "steps writing the root"
}
