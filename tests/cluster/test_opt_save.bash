# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-save=PATH (issue 4): when the step ends, its first node saves the container's
# filesystem (image + changes, deletions included) as an OCI archive that --container-image accepts,
# or as squashfs for a PATH ending in .sqsh, as pyxis. A directory target is refused before the job
# runs; a save that fails fails the step (non-zero from srun, sbatch, salloc) and leaves nothing.

setup_file() {
    DIR_BATCH=$(job_user_home)
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    OUT=$(job_user_home)/saved-$$.tar
    SQSH=$(job_user_home)/saved-$$.sqsh
}

teardown_file() { rm -f "$OUT" "$SQSH"; }

test_save_then_run_the_saved_archive() {
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-writable --container-save="$OUT" \
        sh -c 'echo changed >/etc/slipway-image; mkdir -p /opt/new; echo hi >/opt/new/f; rm /bin/vi'
    assert_success
    assert_file_exists "$OUT"
    run_host skopeo inspect --raw "oci-archive:$OUT"
    assert_success
    assert_output_contains '"application/vnd.oci.image.manifest.v1+json"'
    run_job srun -N2 -K --container-image="$OUT" \
        sh -c 'echo "$(cat /etc/slipway-image) $(cat /opt/new/f) $([ -e /bin/vi ] && echo vi-present || echo vi-gone)"'
    assert_success
    assert_equal 2 "$(grep -cx "changed hi vi-gone" <<<"$output")" "tasks seeing the saved changes"
}

test_save_of_a_read_only_container_is_the_image() {
    run_job srun -N1 -K --container-image="$BUSYBOX" --container-save="$OUT" true
    assert_success
    run_job srun -N1 -K --container-image="$OUT" cat /etc/slipway-image
    assert_success
    assert_equal busybox "${lines[-1]}" "marker of the saved image"
}

test_unwritable_save_path_is_reported() {
    run_job srun -N1 -K --container-image="$BUSYBOX" --container-save=/proc/nope/x.tar true
    assert_failure
    assert_output_contains "--container-save='/proc/nope/x.tar': directory '/proc/nope' does not exist"
}

# /var/lib exists on the login node and the nodes, and the job user may not write there: the step
# runs, the save fails, and the user learns it from the exit status, not only from a log line.
test_failed_save_fails_the_step() {
    run_job srun -N2 --ntasks-per-node=2 -K --container-image="$BUSYBOX" --container-save=/var/lib/slipway-nope.tar \
        sh -c 'echo ran-$SLURM_PROCID'
    assert_failure
    assert_equal 4 "$(grep -c '^ran-[0-3]$' <<<"$output")" "tasks that ran"
    assert_output_contains "slipway: --container-save=/var/lib/slipway-nope.tar: the container was not saved"
    assert_no_file /var/lib/slipway-nope.tar
    [[ -z $(ls /var/lib/slipway-nope.tar* 2>/dev/null) ]] || fail "a temporary file was left"
    local script=$DIR_BATCH/failsave.sh
    printf '#!/bin/sh\n#SBATCH --container-image=%s\n#SBATCH --container-save=/var/lib/slipway-nope.sqsh\n#SBATCH -N1 --time=2\nsrun -K true\n' \
        "$BUSYBOX" >"$script"
    run_batch "$script"
    rm -f "$script"
    assert_failure
    run_job salloc -N1 --time=2 srun -K --container-image="$BUSYBOX" --container-save=/var/lib/slipway-nope.tar true
    assert_failure
    assert_output_contains "the container was not saved"
    # The command's own failure stays its status.
    run_job srun -N1 -K --container-image="$BUSYBOX" --container-save=/var/lib/slipway-nope.tar sh -c 'exit 7'
    assert_equal 7 "$status" "srun's status"
}

test_directory_target_is_refused_before_the_job_runs() {
    local how t0
    for how in srun sbatch salloc; do
        t0=$(now)
        case $how in
            srun) run_job srun -N1 -K --container-image="$BUSYBOX" --container-save=/tmp/ true ;;
            sbatch) run_job sbatch -N1 --container-image="$BUSYBOX" --container-save=/tmp/ --wrap true ;;
            salloc) run_job salloc -N1 --container-image="$BUSYBOX" --container-save=/tmp/ true ;;
        esac
        assert_failure
        assert_less "$(elapsed "$t0")" 5 "seconds for $how to refuse"
        assert_output_contains "slipway: --container-save='/tmp/' is a directory; give a file path, e.g. /tmp/image.sqsh"
    done
    run_job sh -c "cd '$(job_user_home)' && srun -N1 -K --container-image='$BUSYBOX' --container-save=. true"
    assert_failure
    assert_output_contains "is a directory"
}

test_save_to_sqsh_as_pyxis_and_run_it() {
    rm -f "$SQSH"
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-writable --container-save="$SQSH" \
        sh -c 'echo squashed >/etc/slipway-image; rm /bin/vi'
    assert_success
    assert_file_exists "$SQSH"
    run_host unsquashfs -s "$SQSH"
    assert_success
    assert_output_contains "Filesystem size"
    run_host unsquashfs -lln "$SQSH" /etc/slipway-image
    assert_output_contains "0/0"
    run_job salloc -N1 --time=2 srun -K --container-image="$SQSH" \
        sh -c 'echo "$(cat /etc/slipway-image) $([ -e /bin/vi ] && echo vi-present || echo vi-gone)"; [ -e /proc/self ] && echo proc'
    assert_success
    assert_output_contains "squashed vi-gone"
    # Nothing of /proc, /dev or the binds went into the file: the container's root alone.
    run_host unsquashfs -l "$SQSH" /proc/self
    assert_output_not_contains "squashfs-root/proc/self"
}

test_sbatch_save_of_a_step() {
    local script
    script=$(job_user_home)/save-batch-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-writable
#SBATCH -N1 --time=2
srun -K --container-save=$OUT sh -c 'echo from-sbatch >/etc/slipway-image'
EOS
    chown slwuser "$script"
    rm -f "$OUT"
    run_batch "$script"
    rm -f "$script"
    assert_success
    assert_file_exists "$OUT"
    run_job srun -N1 -K --container-image="$OUT" cat /etc/slipway-image
    assert_success
    assert_equal from-sbatch "${lines[-1]}" "marker of the image saved by the batch step"
}

test_salloc_save() {
    rm -f "$OUT"
    run_job salloc -N1 --time=2 --container-image="$BUSYBOX" --container-writable --container-save="$OUT" \
        srun -K sh -c 'echo from-salloc >/etc/slipway-image'
    assert_success
    assert_file_exists "$OUT"
    run_job srun -N1 -K --container-image="$OUT" cat /etc/slipway-image
    assert_success
    assert_equal from-salloc "${lines[-1]}" "marker of the image saved by the salloc step"
}
