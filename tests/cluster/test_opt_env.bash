# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-env=NAME[,...] and the environment precedence of spank_slipway(8), ENVIRONMENT, on the
# sandbox with the `busybox-env` image (Env: FOO=image BAR=image ONLY_IMAGE=image and per-task
# variables set to 99): the image's Env overrides the job's, --container-env keeps the job's
# value, variables only the job has pass through, and per-task variables never come from the image.
# srun, #SBATCH, salloc.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox-env
    ENVIMG=$(image_ref busybox-env)
}

readonly SHOW='echo "FOO=$FOO BAR=$BAR ONLY_IMAGE=$ONLY_IMAGE ONLY_JOB=$ONLY_JOB"'

test_image_env_overrides_the_jobs() {
    run_job env FOO=job BAR=job ONLY_JOB=job srun -N2 -K --container-image="$ENVIMG" sh -c "$SHOW"
    assert_success
    assert_equal 2 "$(grep -cx 'FOO=image BAR=image ONLY_IMAGE=image ONLY_JOB=job' <<<"$output")" "tasks"
}

test_image_path_wins() {
    run_job srun -N1 -K --container-image="$ENVIMG" sh -c 'echo "$PATH"'
    assert_success
    assert_output "/usr/sbin:/usr/bin:/sbin:/bin"
}

test_container_env_keeps_the_jobs_value() {
    run_job env FOO=job BAR=job srun -N2 -K --container-image="$ENVIMG" --container-env=FOO sh -c "$SHOW"
    assert_success
    assert_equal 2 "$(grep -cx 'FOO=job BAR=image ONLY_IMAGE=image ONLY_JOB=' <<<"$output")" "tasks"
    run_job env PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin FOO=job BAR=job \
        srun -N2 -K --container-image="$ENVIMG" --container-env=FOO,BAR,PATH sh -c "$SHOW"' PATH=$PATH'
    assert_success
    assert_equal 2 "$(grep -cx 'FOO=job BAR=job ONLY_IMAGE=image ONLY_JOB= PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' <<<"$output")" "tasks"
}

# SLURM_*, PMIX_*, PMI_*, OMPI_*, SLIPWAY_*: each task's own, never the image's 99.
test_per_task_variables_never_come_from_the_image() {
    run_job srun -N2 --ntasks-per-node=2 -K --mpi=pmix --container-image="$ENVIMG" sh -c \
        'echo "task $SLURM_PROCID local $SLURM_LOCALID pmix $PMIX_RANK pmi ${PMI_RANK:-unset} ompi ${OMPI_COMM_WORLD_RANK:-unset} digest $SLIPWAY_IMAGE_DIGEST"'
    assert_success
    assert_line_count 4
    assert_output_not_contains " 99"
    assert_output_not_contains "sha256:image"
    local line
    for line in "${lines[@]}"; do
        [[ $line =~ ^task\ ([0-7])\ local\ [01]\ pmix\ ([0-7])\ pmi\ unset\ ompi\ unset\ digest\ sha256:[0-9a-f]{64}$ ]] \
            || fail "unexpected task environment: $line"
        assert_equal "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "PMIX_RANK of task ${BASH_REMATCH[1]}"
    done
}

test_sbatch_container_env() {
    local script
    script=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-env-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$ENVIMG
#SBATCH --container-env=FOO
#SBATCH -N2 --ntasks-per-node=1 --time=2
export FOO=job BAR=job
srun -K sh -c 'echo "step FOO=\$FOO BAR=\$BAR"'
EOS
    run_batch "$script"
    rm -f "$script"
    echo "$output" >&2
    assert_success
    assert_equal 2 "$(grep -cx 'step FOO=job BAR=image' <<<"$output")" "steps"
}

test_salloc_container_env() {
    run_job env FOO=job BAR=job salloc -N2 --time=2 --container-image="$ENVIMG" --container-env=BAR \
        srun -K -n2 sh -c 'echo "FOO=$FOO BAR=$BAR"'
    assert_success
    assert_equal 2 "$(grep -cx 'FOO=image BAR=job' <<<"$output")" "steps"
}
