# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-entrypoint / --no-container-entrypoint / --container-entrypoint-log (issue 4): the
# image's entrypoint runs once per node before the tasks, with the image's environment and the
# --container-env names of the job's (as pyxis), not the rest of the job's; what it exports reaches
# every task; a failing entrypoint fails the step with its last line.

setup_file() {
    require_sandbox
    require_plugin
    require_images entrypoint
    IMAGE=$(image_ref entrypoint)
}

test_entrypoint_runs_once_per_node_and_exports_to_tasks() {
    run_job srun -N2 --ntasks-per-node=2 -K --container-image="$IMAGE" --container-entrypoint \
        --container-entrypoint-log sh -c 'echo "task $SLURM_PROCID: $FROM_ENTRYPOINT"'
    assert_success
    assert_equal 4 "$(grep -c 'task [0-3]: set by the entrypoint' <<<"$output")" "tasks with the variable"
    assert_equal 2 "$(grep -c '^entrypoint ran on node[1-4] as ' <<<"$output")" "entrypoint runs (one per node)"
}

test_no_entrypoint_by_default_and_with_the_negation() {
    run_job srun -N1 -K --container-image="$IMAGE" sh -c 'echo "[$FROM_ENTRYPOINT]"'
    assert_success
    assert_output "[]"
    run_job env SLIPWAY_CONTAINER_ENTRYPOINT=1 srun -N1 -K --container-image="$IMAGE" \
        --no-container-entrypoint sh -c 'echo "[$FROM_ENTRYPOINT]"'
    assert_success
    assert_output "[]"
}

test_entrypoint_log_is_off_unless_asked() {
    run_job srun -N1 -K --container-image="$IMAGE" --container-entrypoint true
    assert_success
    assert_output_not_contains "entrypoint ran on"
}

test_entrypoint_sees_only_the_container_env_names_of_the_job() {
    # ENTRYPOINT_FAIL=1 makes the entrypoint fail, if it can see it.
    run_job env ENTRYPOINT_FAIL=1 srun -N1 -K --container-image="$IMAGE" --container-entrypoint true
    assert_success
    run_job env ENTRYPOINT_FAIL=1 salloc -N1 --time=2 srun -K --container-image="$IMAGE" \
        --container-entrypoint --container-env=ENTRYPOINT_FAIL true
    assert_failure
    assert_output_contains "entrypoint: failing as asked"
}

test_failing_entrypoint_fails_the_step_with_its_message() {
    run_job env ENTRYPOINT_FAIL=1 srun -N1 -K --container-image="$IMAGE" --container-entrypoint \
        --container-env=ENTRYPOINT_FAIL true
    assert_failure
    assert_output_contains "slipway: the image's entrypoint (/entrypoint.sh) failed with status 3: entrypoint: failing as asked; fix the image or run with --no-container-entrypoint"
}

test_sbatch_entrypoint_reaches_every_step() {
    local script
    script=$(job_user_home)/entrypoint-batch-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$IMAGE
#SBATCH --container-entrypoint --container-entrypoint-log
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'echo "step \$SLURM_PROCID: \$FROM_ENTRYPOINT"'
srun -K --no-container-entrypoint sh -c 'echo "plain \$SLURM_PROCID: [\$FROM_ENTRYPOINT]"'
EOS
    run_batch "$script"
    rm -f "$script"
    assert_success
    assert_equal 2 "$(grep -c '^step [01]: set by the entrypoint$' <<<"$output")" "steps with the variable"
    assert_equal 2 "$(grep -c '^plain [01]: \[\]$' <<<"$output")" "steps that turned it off"
    assert_equal 2 "$(grep -c '^entrypoint ran on node[0-9] as ' <<<"$output")" "entrypoint runs (first step only)"
}

test_salloc_entrypoint() {
    run_job salloc -N2 --time=2 --container-image="$IMAGE" --container-entrypoint \
        srun -K -n2 sh -c 'echo "task $SLURM_PROCID: $FROM_ENTRYPOINT"'
    assert_success
    assert_equal 2 "$(grep -c '^task [01]: set by the entrypoint$' <<<"$output")" "tasks with the variable"
    assert_output_not_contains "entrypoint ran on"
}
