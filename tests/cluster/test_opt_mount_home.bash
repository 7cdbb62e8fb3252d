# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-mount-home / --no-container-mount-home on the sandbox: the job user's home directory
# is bound into the container (the default) or not. srun, #SBATCH, salloc. As enroot's home hook
# (which pyxis uses): the job's $HOME is bound, the user database's home only when HOME is unset,
# and a HOME that is no directory fails the step.

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

# A job whose HOME points elsewhere (a scratch home; here beside the job user's home, which the
# nodes share) gets that directory, at the same path, as HOME; the user database's home is not
# bound.
test_mount_home_binds_job_HOME() {
    local alt
    alt=/home/$MARK.alt
    mkdir -p "$alt" && echo alt-home >"$alt/$MARK" && chown -R slwuser: "$alt"
    run_job env HOME="$alt" srun -N2 -K --container-image="$BUSYBOX" --container-workdir=/ \
        sh -c "$(probe); echo \"HOME=\$HOME\"; [ -e '$(job_user_home)/$MARK' ] && echo db-home bound || :"
    rm -rf "$alt"
    assert_success
    assert_equal 2 "$(grep -cx 'home alt-home' <<<"$output")" "tasks seeing the job's HOME"
    assert_equal 2 "$(grep -cxF "HOME=$alt" <<<"$output")" "tasks with HOME set"
    assert_output_not_contains "db-home bound"
}

test_sbatch_mount_home_binds_job_HOME() {
    local alt script
    alt=/home/$MARK.alt2
    script=$(job_user_home)/$MARK.home.sh
    mkdir -p "$alt" && echo alt-home >"$alt/$MARK" && chown -R slwuser: "$alt"
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-workdir=/
#SBATCH -N1 --time=2
export HOME=$alt
srun -K sh -c '$(probe); [ -e $(job_user_home)/$MARK ] && echo db-home bound || :'
EOS
    run_batch "$script"
    rm -rf "$alt" "$script"
    assert_success
    assert_equal 1 "$(grep -cx 'home alt-home' <<<"$output")" "the step seeing the script's HOME"
    assert_output_not_contains "db-home bound"
}

# enroot's hook takes the user database's home when HOME is unset, and sets HOME to it.
test_mount_home_without_HOME_binds_the_database_home() {
    run_job env -u HOME srun -N1 -K --container-image="$BUSYBOX" --container-workdir=/ \
        sh -c "$(probe); echo \"HOME=\$HOME\""
    assert_success
    assert_output_contains "home in-home"
    assert_output_contains "HOME=$(job_user_home)"
}

# enroot cannot bind a HOME that is no directory and the container does not start; we say why.
test_mount_home_refuses_a_HOME_that_is_no_directory() {
    run_job env HOME=/nonexistent-home srun -N1 -K --container-image="$BUSYBOX" true
    assert_failure
    assert_output_contains "--container-mount-home: HOME='/nonexistent-home' is not a directory"
    assert_output_contains "--no-container-mount-home"
    run_job env HOME=/nonexistent-home srun -N1 -K --container-image="$BUSYBOX" \
        --no-container-mount-home --container-workdir=/ true
    assert_success
}
