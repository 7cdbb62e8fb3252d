# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Bad container options fail at submission, in srun, sbatch and salloc alike: before anything is
# queued, fast, with exactly one `slipway:` line that names the option and says how to fix it
# (Slurm adds its own "Invalid ... argument" or "plugin ... failed" line, which we do not control).
# Also: an unknown plugstack.conf key (a second `up` with SLIPWAY_PLUGIN_ARGS=bogus=1, then restored).

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    # The tests below assert that nothing was queued: jobs an earlier file cancelled may still be
    # completing (CG) for a while, so wait for the user's queue to drain first.
    local i
    for ((i = 0; i < 60; i++)); do
        run_job squeue -h -u slwuser
        [[ -z $output ]] && return 0
        sleep 1
    done
    fail "jobs of slwuser still queued before the test: $output"
}

# submit_each OPTION...: try srun, sbatch and salloc with a busybox image and OPTION...; fail on
# the first that is accepted, that is slow, or whose `slipway:` line count is not 1. Leaves the
# output of the last one (salloc) in $output, and each one's in $out_srun, $out_sbatch, $out_salloc.
submit_each() {
    local how t0
    for how in srun sbatch salloc; do
        t0=$(now)
        case $how in
            srun) run_job srun -N1 -K --container-image="$BUSYBOX" "$@" true ;;
            sbatch) run_job sbatch -N1 --container-image="$BUSYBOX" "$@" --wrap true ;;
            salloc) run_job salloc -N1 --container-image="$BUSYBOX" "$@" true ;;
        esac
        ((status != 0)) || fail "$how $* was accepted"
        assert_less "$(elapsed "$t0")" 5 "seconds for $how to refuse $*"
        assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines from $how $*"
        printf -v "out_$how" '%s' "$output"
    done
    run_job squeue -h -u slwuser
    assert_output ""
}

# assert_each_contains TEXT: each of srun's, sbatch's and salloc's errors contains TEXT.
assert_each_contains() {
    local how
    for how in srun sbatch salloc; do
        local var=out_$how
        [[ ${!var} == *"$1"* ]] || fail "$how's error does not contain '$1':"$'\n'"${!var}"
    done
}

test_malformed_mount_spec() {
    submit_each --container-mounts=/tmp:/a:ro:extra
    assert_each_contains "slipway: --container-mounts='/tmp:/a:ro:extra' is malformed; use SRC[:DST[:FLAGS]]"
    submit_each --container-mounts=/tmp:/a,,/tmp:/b
    assert_each_contains "--container-mounts='' is malformed"
}

test_unknown_mount_flag() {
    submit_each --container-mounts=/tmp:/a:rx
    assert_each_contains "--container-mounts='/tmp:/a:rx' has an unknown flag 'rx'; use ro, rw, rbind, norbind"
}

test_missing_mount_source() {
    submit_each --container-mounts=/nonexistent-slipway-src:/data
    assert_each_contains "slipway: --container-mounts: source path does not exist: '/nonexistent-slipway-src'; create it or fix the path"
}

test_relative_mount_destination() {
    submit_each --container-mounts=/tmp:data
    assert_each_contains "--container-mounts='/tmp:data' needs an absolute destination inside the container"
}

test_mount_destination_with_dotdot() {
    submit_each --container-mounts=/tmp:/a/../../etc
    assert_each_contains "--container-mounts='/tmp:/a/../../etc' needs an absolute destination"
}

test_unknown_unshare_value() {
    submit_each --container-unshare=net,pid
    assert_each_contains "slipway: --container-unshare='net,pid' names an unknown namespace 'pid'; it takes net, ipc and uts, separated by commas"
}

test_empty_workdir() {
    submit_each --container-workdir=
    assert_each_contains "slipway: --container-workdir='' needs a directory inside the container"
}

test_bad_container_name_and_mode() {
    submit_each --container-name=a/b
    assert_each_contains "slipway: --container-name='a/b' needs a NAME of letters, digits"
    submit_each --container-name=ok:sometimes
    assert_each_contains "--container-name='ok:sometimes' has an unknown mode; use NAME[:create|exec|no_exec|auto]"
}

test_bad_container_env_names() {
    submit_each --container-env=FOO=1
    assert_each_contains "slipway: --container-env='FOO=1' takes variable names separated by commas"
}

test_contradictory_flags() {
    submit_each --container-writable --container-readonly
    assert_each_contains "slipway: --container-writable and --container-readonly contradict each other; give one"
    submit_each --container-mount-home --no-container-mount-home
    assert_each_contains "--container-mount-home and --no-container-mount-home contradict each other"
    submit_each --container-remap-root --no-container-remap-root
    assert_each_contains "--container-remap-root and --no-container-remap-root contradict each other"
}

# The same options as #SBATCH lines of a script: sbatch refuses the script, nothing is queued.
test_bad_options_in_sbatch_directives() {
    local script t0 bad
    script=$(job_user_home)/bad-directive-$$.sh
    for bad in --container-mounts=/tmp:data --container-unshare=pid "--container-writable --container-readonly"; do
        printf '#!/bin/sh\n#SBATCH --container-image=%s\n#SBATCH %s\n#SBATCH -N1 --time=1\nsrun true\n' \
            "$BUSYBOX" "$bad" >"$script"
        chown slwuser "$script"
        t0=$(now)
        run_job sbatch "$script"
        ((status != 0)) || fail "sbatch accepted a script with '#SBATCH $bad'"
        assert_less "$(elapsed "$t0")" 5 "seconds for sbatch to refuse '#SBATCH $bad'"
        assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines for '#SBATCH $bad'"
        assert_output_contains "slipway: ${bad%%[= ]*}"
    done
    rm -f "$script"
    run_job squeue -h -u slwuser
    assert_output ""
}

test_container_option_without_an_image() {
    run_job srun -N1 -K --container-mounts=/tmp:/data true
    assert_failure
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines"
    assert_output_contains "slipway: --container-mounts needs --container-image (or --container-name of an existing container)"
}

test_name_create_without_an_image() {
    run_job srun -N1 -K --container-name=fresh:create true
    assert_failure
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines"
    assert_output_contains "slipway: --container-name=fresh:create needs --container-image to create it from"
}

# The plugin is reloaded with an unknown key: srun and sbatch refuse with the key named and the
# known keys listed; slurmd refuses to start with the same line in its log. Then restored.
test_unknown_plugstack_key() {
    local t0 rc=0
    SLIPWAY_PLUGIN_ARGS="bogus=1" "$SANDBOX" up >/dev/null 2>&1 || rc=$?
    trap '"$SANDBOX" up >/dev/null 2>&1 || echo "# could not restore the sandbox" >&2' EXIT
    grep -q ' bogus=1' "$SANDBOX_DIR/etc/plugstack.conf" || fail "plugstack.conf was not rewritten (up rc=$rc)"
    t0=$(now)
    run_job srun -N1 -K true
    assert_failure
    assert_less "$(elapsed "$t0")" 5 "seconds to refuse"
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines"
    assert_output_contains "slipway: plugstack.conf: unknown argument 'bogus=1'; known keys (key=value): cache_dir,"
    run_job sbatch --wrap true
    assert_failure
    assert_output_contains "slipway: plugstack.conf: unknown argument 'bogus=1'"
    grep -q "slipway: plugstack.conf: unknown argument 'bogus=1'" "$SANDBOX_DIR"/log/slurmd-node1.log \
        || fail "slurmd's log does not say why the plugin failed"
    "$SANDBOX" up >/dev/null 2>&1 || fail "could not restore the sandbox"
    trap - EXIT
    run_job srun -N1 -K --container-image="$BUSYBOX" true
    assert_success
}

