# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-workdir=PATH on the sandbox: every task of every node starts in PATH inside the
# container; by default, as with pyxis (enroot's /etc/rc), in the image's WorkingDir, or for an
# image without one in /, wherever srun ran (which is not bound in for it); a PATH missing from the
# image fails naming the option, with pyxis's "PATH: No such file or directory". srun, #SBATCH,
# salloc.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox entrypoint
    BUSYBOX=$(image_ref busybox)
    WITH_WORKDIR=$(image_ref entrypoint)   # WorkingDir /srv/app
    # A submission directory outside home and /tmp, the same on every node (the nodes share / but
    # not /tmp or /var/tmp).
    OUTSIDE=/srv/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-workdir
    rm -rf "$OUTSIDE"
    mkdir -p "$OUTSIDE"
    echo outside >"$OUTSIDE/marker"
    chown -R slwuser: "$OUTSIDE"
}

teardown_file() { rm -rf "$OUTSIDE"; }

test_workdir_is_the_cwd_of_every_task() {
    run_job srun -N4 --ntasks-per-node=2 -K --container-image="$BUSYBOX" --container-workdir=/etc \
        sh -c 'pwd; cat slipway-image'
    assert_success
    assert_equal 8 "$(grep -cx /etc <<<"$output")" "tasks in /etc"
    assert_equal 8 "$(grep -cx busybox <<<"$output")" "tasks reading ./slipway-image"
}

test_default_is_the_root_as_with_pyxis() {
    run_job srun -N2 -K --container-image="$BUSYBOX" pwd
    assert_success
    assert_equal 2 "$(grep -cx / <<<"$output")" "tasks in /"
    run_job salloc -N1 --time=2 --container-image="$BUSYBOX" srun -K pwd
    assert_success
    assert_output_contains /
    assert_output_not_contains "$(job_user_home)"
}

# pyxis binds nothing for the directory srun ran in: neither do we.
test_submission_directory_is_not_bound() {
    run_job srun -N2 -K -D "$OUTSIDE" --container-image="$BUSYBOX" \
        sh -c "pwd; [ -e '$OUTSIDE/marker' ] && echo bound || echo not-bound"
    assert_success
    assert_equal 2 "$(grep -cx / <<<"$output")" "tasks in /"
    assert_equal 2 "$(grep -cx not-bound <<<"$output")" "tasks without $OUTSIDE"
}

test_sbatch_default_is_the_root() {
    local script
    script=$OUTSIDE/default.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH -N1 --time=2
srun -K sh -c 'echo "step \$(pwd)"'
EOS
    run_batch "$script" -D "$OUTSIDE"
    rm -f "$script"
    assert_success
    assert_output "step /"
    assert_output_not_contains "$OUTSIDE"
}

test_workdir_missing_in_the_image_fails_naming_the_option() {
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-workdir=/no/such/dir true
    assert_failure
    assert_output_contains "working directory in the container: /no/such/dir: No such file or directory"
    assert_output_contains "check --container-workdir"
}

test_sbatch_workdir() {
    local script
    script=$OUTSIDE/job.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-workdir=/proc
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'echo "step \$SLURM_PROCID \$(pwd)"'
srun -K --container-workdir=/etc sh -c 'echo "step \$SLURM_PROCID \$(pwd)"'
EOS
    run_batch "$script"
    echo "$output" >&2
    assert_success
    assert_equal 2 "$(grep -c '^step [01] /proc$' <<<"$output")" "steps in /proc"
    assert_equal 2 "$(grep -c '^step [01] /etc$' <<<"$output")" "steps in /etc (srun's option wins)"
}

test_salloc_workdir() {
    run_job salloc -N2 --time=2 --container-image="$BUSYBOX" --container-workdir=/etc srun -K -n2 pwd
    assert_success
    assert_equal 2 "$(grep -cx /etc <<<"$output")" "steps in /etc"
}

test_image_workingdir_is_the_default_and_the_option_wins() {
    run_job srun -N2 -K --container-image="$WITH_WORKDIR" sh -c 'pwd; cat marker'
    assert_success
    assert_equal 2 "$(grep -cx /srv/app <<<"$output")" "tasks in the image's WorkingDir"
    assert_equal 2 "$(grep -cx app <<<"$output")" "tasks reading ./marker"
    run_job srun -N2 -K --container-image="$WITH_WORKDIR" --container-workdir="$(job_user_home)" pwd
    assert_success
    assert_equal 2 "$(grep -cx "$(job_user_home)" <<<"$output")" "tasks in --container-workdir"
    run_job salloc -N1 --time=2 --container-image="$WITH_WORKDIR" srun -K pwd
    assert_success
    assert_output_contains /srv/app
}
