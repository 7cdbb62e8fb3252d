# --container-save=PATH (issue 4): when the step ends, its first node saves the container's
# filesystem (image + changes, deletions included) as an OCI archive that --container-image accepts.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    OUT=$(job_user_home)/saved-$$.tar
}

teardown_file() { rm -f "$OUT"; }

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
    assert_output_contains "--container-save=/proc/nope/x.tar"
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
