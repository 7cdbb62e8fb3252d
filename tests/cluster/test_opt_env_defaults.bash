# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Environment defaults on the sandbox: SLIPWAY_CONTAINER_* and, for pyxis job scripts,
# PYXIS_CONTAINER_* work as the options do; a command-line option (or its --no- twin) beats the
# environment, SLIPWAY_ beats PYXIS_, and a bad value fails at submission naming the variable.
# srun, sbatch (variables exported at submission or in the script), salloc.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox busybox-env
    BUSYBOX=$(image_ref busybox)
    ENVIMG=$(image_ref busybox-env)
    DIR=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-envdefaults
    rm -rf "$DIR"
    mkdir -p "$DIR"
    echo data >"$DIR/in"
    chown -R slwuser: "$DIR"
}

teardown_file() { rm -rf "$DIR"; }

test_slipway_container_image() {
    run_job env SLIPWAY_CONTAINER_IMAGE="$BUSYBOX" srun -N2 -K cat /etc/slipway-image
    assert_success
    assert_equal 2 "$(grep -cx busybox <<<"$output")" "tasks in the image"
}

test_pyxis_container_image() {
    run_job env PYXIS_CONTAINER_IMAGE="$BUSYBOX" srun -N2 -K cat /etc/slipway-image
    assert_success
    assert_equal 2 "$(grep -cx busybox <<<"$output")" "tasks in the image"
}

test_command_line_beats_environment_and_slipway_beats_pyxis() {
    run_job env SLIPWAY_CONTAINER_IMAGE="$ENVIMG" srun -N1 -K --container-image="$BUSYBOX" cat /etc/slipway-image
    assert_success
    assert_output busybox
    run_job env SLIPWAY_CONTAINER_IMAGE="$BUSYBOX" PYXIS_CONTAINER_IMAGE="$ENVIMG" srun -N1 -K cat /etc/slipway-image
    assert_success
    assert_output busybox
}

test_flag_variables() {
    local probe='touch /new 2>/dev/null && echo writable || echo read-only'
    run_job env SLIPWAY_CONTAINER_WRITABLE=1 srun -N1 -K --container-image="$BUSYBOX" sh -c "$probe"
    assert_output writable
    run_job env PYXIS_CONTAINER_WRITABLE=1 srun -N1 -K --container-image="$BUSYBOX" sh -c "$probe"
    assert_output writable
    run_job env SLIPWAY_CONTAINER_WRITABLE=0 srun -N1 -K --container-image="$BUSYBOX" sh -c "$probe"
    assert_output read-only
    # The --no- twin on the command line beats the variable without a contradiction.
    run_job env SLIPWAY_CONTAINER_WRITABLE=1 srun -N1 -K --container-image="$BUSYBOX" --container-readonly sh -c "$probe"
    assert_success
    assert_output read-only
    run_job env SLIPWAY_CONTAINER_REMAP_ROOT=1 srun -N1 -K --container-image="$BUSYBOX" id -u
    assert_output 0
    run_job env PYXIS_CONTAINER_MOUNT_HOME=0 srun -N1 -K --container-image="$BUSYBOX" --container-workdir=/ \
        sh -c '[ -e "$HOME" ] && echo home || echo no-home'
    assert_output no-home
}

test_value_variables() {
    run_job env SLIPWAY_CONTAINER_MOUNTS="$DIR:/data:ro" SLIPWAY_CONTAINER_WORKDIR=/data \
        SLIPWAY_CONTAINER_UNSHARE=uts PYXIS_CONTAINER_ENV=FOO FOO=job \
        srun -N2 -w node[1-2] -K --container-image="$ENVIMG" sh -c 'echo "$(pwd) $(cat in) FOO=$FOO $(readlink /proc/self/ns/uts)"'
    assert_success
    assert_equal 2 "$(grep -c "^/data data FOO=job uts:" <<<"$output")" "tasks"
    local node_uts
    node_uts=$(readlink /proc/"$(cat "$SANDBOX_DIR/run/slurmd-node1.pid")"/ns/uts)
    assert_output_not_contains "$node_uts"
}

test_container_name_variable() {
    run_job env PYXIS_CONTAINER_NAME=fromenv salloc -N1 --time=2 sh -c "
        srun -K --container-image=$BUSYBOX sh -c 'echo kept >/state' && srun -K cat /state"
    assert_success
    assert_output_contains $'\nkept'
}

test_bad_variable_fails_at_submission_naming_it() {
    local t0
    t0=$(now)
    run_job env SLIPWAY_CONTAINER_WRITABLE=maybe srun -N1 -K --container-image="$BUSYBOX" true
    assert_failure
    assert_less "$(elapsed "$t0")" 5 "seconds to refuse"
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines"
    assert_output_contains "SLIPWAY_CONTAINER_WRITABLE='maybe' must be 1 or 0"
    run_job env PYXIS_CONTAINER_MOUNTS=/tmp:relative srun -N1 -K --container-image="$BUSYBOX" true
    assert_failure
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines"
    assert_output_contains "PYXIS_CONTAINER_MOUNTS"
    assert_output_contains "needs an absolute destination"
}

test_sbatch_with_variables() {
    local script=$DIR/job.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'echo "step \$SLURM_PROCID \$(cat /etc/slipway-image)"'
export SLIPWAY_CONTAINER_IMAGE=$ENVIMG
srun -K sh -c 'echo "step \$SLURM_PROCID \$(cat /etc/slipway-image)"'
EOS
    chown slwuser "$script"
    # Exported at submission: the script's first step runs in busybox, the second in busybox-env.
    # (slipway-sandbox exec passes the caller's SLIPWAY_* variables on.)
    SLIPWAY_CONTAINER_IMAGE="$BUSYBOX" run_batch "$script"
    echo "$output" >&2
    assert_success
    assert_equal 2 "$(grep -c '^step [01] busybox$' <<<"$output")" "steps in busybox"
    assert_equal 2 "$(grep -c '^step [01] busybox-env$' <<<"$output")" "steps in busybox-env"
}

test_salloc_with_pyxis_variable() {
    run_job env PYXIS_CONTAINER_IMAGE="$BUSYBOX" salloc -N2 --time=2 srun -K -n2 cat /etc/slipway-image
    assert_success
    assert_equal 2 "$(grep -cx busybox <<<"$output")" "steps in the image"
}
