# --container-name=NAME[:create|exec|no_exec|auto] on the sandbox: the modes, separate names, the
# default writability of a named container, one step at a time per name and node, scope=global
# across jobs. (Persistence across steps and the epilog's clean-up: test_lifecycle.bash.)

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
}

# in_alloc NODES SCRIPT: run SCRIPT (sh) in a fresh allocation of NODES nodes, as the job user;
# $output and $lines without salloc's and srun's progress lines.
in_alloc() {
    run_job salloc -N"$1" --time=2 sh -c "$2"
    drop_progress_lines
}

drop_progress_lines() {
    output=$(grep -Ev '^(salloc: |srun: job [0-9]+ (queued|has been allocated))' <<<"$output" || true)
    mapfile -t lines <<<"$output"
}

test_auto_creates_then_reuses_without_an_image() {
    in_alloc 2 "
        srun -K -N2 --container-image=$BUSYBOX --container-name=reuse sh -c 'echo \$SLURM_JOB_ID >/state' &&
        srun -K -N2 --container-name=reuse sh -c 'echo got \$(cat /state) \$(cat /etc/slipway-image)'"
    assert_success
    assert_equal 2 "$(grep -Ec '^got [0-9]+ busybox$' <<<"$output")" "tasks seeing the first step's file"
}

test_create_starts_afresh() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=fresh sh -c 'echo old >/state' &&
        srun -K --container-image=$BUSYBOX --container-name=fresh:create sh -c 'cat /state 2>&1; echo done'"
    assert_success
    assert_output_contains "No such file or directory"
    assert_output_not_contains "old"
}

test_exec_needs_an_existing_container() {
    in_alloc 1 "srun -K --container-image=$BUSYBOX --container-name=absent:exec true"
    assert_failure
    assert_output_contains "slipway: container 'absent' does not exist on node"
    assert_output_contains "create it first with --container-name=absent --container-image=IMAGE"
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=there sh -c 'echo kept >/state' &&
        srun -K --container-name=there:exec cat /state"
    assert_success
    assert_output "kept"
}

test_no_exec_reuses_like_auto() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=noexec:no_exec sh -c 'echo kept >/state' &&
        srun -K --container-name=noexec:no_exec cat /state"
    assert_success
    assert_output "kept"
}

test_names_are_separate() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=one sh -c 'echo one >/state' &&
        srun -K --container-image=$BUSYBOX --container-name=two sh -c 'cat /state 2>&1; echo two >/state' &&
        srun -K --container-name=one cat /state"
    assert_success
    assert_output_contains "No such file or directory"
    assert_equal one "${lines[-1]}" "container one's file"
}

test_named_is_writable_unless_readonly() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=ro sh -c 'echo w >/state && echo wrote' &&
        srun -K --container-name=ro --container-readonly sh -c 'cat /state; (echo x >/other) 2>&1; echo end'"
    assert_success
    assert_equal wrote "${lines[0]}" "first step"
    assert_output_contains "Read-only file system"
    assert_equal end "${lines[-1]}" "last line"
    [[ $output == *$'\nw\n'* ]] || fail "the read-only step does not see /state:"$'\n'"$output"
}

test_a_name_is_used_by_one_step_at_a_time() {
    in_alloc 1 "
        srun -K --overlap -n1 --container-image=$BUSYBOX --container-name=busy sleep 3 &
        sleep 1.5
        srun -K --overlap -n1 --container-image=$BUSYBOX --container-name=busy true; echo second=\$?
        wait"
    assert_output_contains "second=1"
    assert_output_contains "slipway: container 'busy' is in use by another step on node1; wait for that step or use another --container-name"
}

test_sbatch_named_container() {
    local script
    script=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-name-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-name=batch
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'hostname >/state'
srun -K sh -c 'echo "step \$SLURM_PROCID saw \$(cat /state)"'
EOS
    chown slwuser "$script"
    run_batch "$script"
    echo "$output" >&2
    rm -f "$script"
    assert_success
    assert_equal 2 "$(grep -Ec '^step ([01]) saw node[0-9]+$' <<<"$output")" "steps seeing the first step's file"
}

# container_scope=global (a second `up`, then restored): a container outlives its job.
test_global_scope_outlives_the_job() {
    SLIPWAY_PLUGIN_ARGS="container_scope=global" "$SANDBOX" up >/dev/null 2>&1 || fail "up with container_scope=global failed"
    trap '"$SANDBOX" up >/dev/null 2>&1 || echo "# could not restore the sandbox" >&2' EXIT
    local cache
    cache=$SANDBOX_DIR/nodes/node2/var-tmp/slipway-$(id -u slwuser)
    run_job srun -N1 -w node2 -K --container-image="$BUSYBOX" --container-name=global-$$:create \
        sh -c 'echo $SLURM_JOB_ID >/state'
    assert_success
    run_job srun -N1 -w node2 -K --container-name=global-$$:exec cat /state
    drop_progress_lines
    assert_success
    assert_output_matches '^[0-9]+$'
    [[ -d $cache/containers/global/global-$$ ]] || fail "no $cache/containers/global/global-$$"
    rm -rf "$cache/containers/global/global-$$" "$cache/containers/global/global-$$.lock"
}
