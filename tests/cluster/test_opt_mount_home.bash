# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-mount-home / --no-container-mount-home on the sandbox: the job user's home directory
# is bound into the container (the default) or not. srun, #SBATCH, salloc.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    MARK=slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-home-marker
    echo in-home >"$(job_user_home)/$MARK"
    chown slwuser: "$(job_user_home)/$MARK"
}

teardown_file() { rm -f "$(job_user_home)/$MARK"; }


probe() { echo "if [ -e \"\$HOME/$MARK\" ]; then echo \"home \$(cat \"\$HOME/$MARK\")\"; else echo home absent; fi"; }

test_home_is_bound_by_default() {
    run_job srun -N4 -K --container-image="$BUSYBOX" --container-workdir=/ sh -c "$(probe)"
    assert_success
    assert_equal 4 "$(grep -cx 'home in-home' <<<"$output")" "tasks seeing home"
}

test_mount_home_flag_binds_it_rw() {
    rm -f "$(job_user_home)/$MARK.w"
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-workdir=/ --container-mount-home \
        sh -c "$(probe); echo x >>\$HOME/$MARK.w"
    assert_success
    assert_equal 2 "$(grep -cx 'home in-home' <<<"$output")" "tasks seeing home"
    assert_equal 2 "$(wc -l <"$(job_user_home)/$MARK.w")" "lines written to home"
    rm -f "$(job_user_home)/$MARK.w"
}

test_no_mount_home_leaves_it_out() {
    run_job srun -N4 -K --container-image="$BUSYBOX" --container-workdir=/ --no-container-mount-home \
        sh -c "$(probe)"
    assert_success
    assert_equal 4 "$(grep -cx 'home absent' <<<"$output")" "tasks without home"
}

test_sbatch_no_mount_home() {
    local script
    script=$(job_user_home)/$MARK.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --no-container-mount-home
#SBATCH --container-workdir=/
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c '$(probe)'
srun -K --container-mount-home sh -c '$(probe)'
EOS
    chown slwuser "$script"
    run_batch "$script"
    echo "$output" >&2
    rm -f "$script"
    assert_success
    assert_equal 2 "$(grep -cx 'home absent' <<<"$output")" "steps without home"
    assert_equal 2 "$(grep -cx 'home in-home' <<<"$output")" "steps with --container-mount-home"
}

test_salloc_no_mount_home() {
    run_job salloc -N2 --time=2 --container-image="$BUSYBOX" --no-container-mount-home \
        --container-workdir=/ srun -K -n2 sh -c "$(probe)"
    assert_success
    assert_equal 2 "$(grep -cx 'home absent' <<<"$output")" "steps without home"
}
