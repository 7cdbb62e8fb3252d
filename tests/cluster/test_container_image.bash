# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-image on the sandbox (issue 2): every task of srun, of a batch script's steps and of
# salloc's steps runs inside the image pulled from the registry, as the job user; a wrong image
# fails at submission, fast, with one line naming the image and the registry. Also pyxis's forms:
# REGISTRY#REPO and enroot's squashfs files.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
}

# The mount namespaces of the nodes' slurmd (what a task outside a container would have).
node_mount_namespaces() {
    local f
    for f in "$SANDBOX_DIR"/run/slurmd-node*.pid; do readlink "/proc/$(cat "$f")/ns/mnt"; done
}

# What each task reports about itself: rank, image marker, whether the host's slurmd binary is
# visible, its mount namespace, its uid.
readonly PROBE='echo "rank=$SLURM_PROCID image=$(cat /etc/slipway-image) slurmd=$([ -e /usr/sbin/slurmd ] && echo present || echo absent) mnt=$(readlink /proc/self/ns/mnt) uid=$(id -u)"'

test_srun_8_tasks_on_4_nodes_run_inside_the_image() {
    run_job srun -N4 --ntasks-per-node=2 -K --container-image="$BUSYBOX" sh -c "$PROBE"
    assert_success
    # srun says when it had to wait for the nodes (a previous job still completing): not a task.
    mapfile -t lines < <(grep -v '^srun: job [0-9]* \(queued and waiting\|has been allocated\)' <<<"$output")
    assert_equal 8 "${#lines[@]}" "lines from the tasks"
    local ranks host_ns line
    ranks=$(printf '%s\n' "${lines[@]}" | sed -n 's/^rank=\([0-9]*\) .*/\1/p' | sort -n | tr '\n' ' ')
    assert_equal "0 1 2 3 4 5 6 7 " "$ranks" "ranks"
    host_ns=$(node_mount_namespaces)
    for line in "${lines[@]}"; do
        [[ $line == *" image=busybox "* ]] || fail "task is not in the image: $line"
        [[ $line == *" slurmd=absent "* ]] || fail "task sees the host's /usr/sbin/slurmd: $line"
        [[ $line == *" uid=$(id -u slwuser)" ]] || fail "task is not the job user: $line"
        local ns=${line#* mnt=}
        ns=${ns%% *}
        [[ -n $ns && $host_ns != *"$ns"* ]] || fail "task shares a node's mount namespace: $line"
    done
}

test_batch_script_steps_run_in_the_image() {
    local script
    script=$(job_user_home)/container-batch-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH -N2 --ntasks-per-node=2 --time=2
srun -K sh -c 'echo "step \$SLURM_PROCID \$(cat /etc/slipway-image)"'
EOS
    run_batch "$script"
    rm -f "$script"
    assert_success
    assert_equal 4 "$(grep -c '^step [0-3] busybox$' <<<"$output")" "steps inside busybox"
}

test_salloc_steps_run_in_the_image() {
    run_job salloc -N2 --time=2 --container-image="$BUSYBOX" srun -K -n2 cat /etc/slipway-image
    assert_success
    assert_equal 2 "$(grep -cx busybox <<<"$output")" "tasks inside busybox"
}

test_root_is_read_only_and_the_cache_is_untouched() {
    run_job srun -N1 -w node1 -K --container-image="$BUSYBOX" \
        sh -c 'echo changed 2>&1 >/etc/slipway-image; touch /new 2>&1; echo done'
    assert_success
    assert_output_contains "Read-only file system"
    assert_output_contains "done"
    # The cache keeps an image under its manifest digest (images/<hex>).
    local cache=$SANDBOX_DIR/nodes/node1/var-tmp/slipway-$(id -u slwuser) digest
    digest=$(skopeo inspect --tls-verify=false --format '{{.Digest}}' "docker://$BUSYBOX") ||
        fail "cannot read busybox's digest from the registry"
    run_root cat "$cache/images/${digest#sha256:}/rootfs/etc/slipway-image"
    assert_output "busybox"
}

test_wrong_image_fails_within_10s_with_one_line() {
    local t0 ref
    ref=${BUSYBOX%/busybox:latest}/no-such-image
    t0=$(now)
    run_job srun -N4 -K --container-image="$ref" true
    assert_failure
    assert_less "$(elapsed "$t0")" 10 "seconds to fail"
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway error lines"
    # pyxis's phrase and the image as the user wrote it, then the cause and the fix.
    assert_output_contains "slipway: failed to import docker image: $ref: image '$ref:latest' not found on registry ${ref%%/*}"
    run_job squeue -h -u slwuser
    assert_output ""
}

test_unreachable_registry_fails_fast() {
    local t0
    t0=$(now)
    run_job srun -N1 -K --container-image=$SANDBOX_NET.1:5999/slipway/busybox true
    assert_failure
    assert_less "$(elapsed "$t0")" 10 "seconds to fail"
    assert_output_contains "slipway: failed to import docker image: $SANDBOX_NET.1:5999/slipway/busybox: cannot reach registry $SANDBOX_NET.1:5999"
}

test_bad_dl_gpus_is_rejected_at_submission() {
    run_job srun -N1 -K --dl-gpus=0 true
    assert_failure
    assert_output_contains "--dl-gpus='0' is not valid"
    run_job srun -N1 -K --dl-gpus=auto true
    assert_success
}

test_pyxis_registry_hash_form_works() {
    # pyxis/enroot scripts write REGISTRY#REPO (e.g. nvcr.io#nvidia/pytorch:24.01-py3).
    run_job srun -N1 -K --container-image="${BUSYBOX/\/slipway\//#slipway/}" cat /etc/slipway-image
    assert_success
    assert_output "busybox"
}

# What pyxis users have on disk: enroot's squashfs images (from `enroot import` or pyxis's own
# --container-save). Env comes from the image's /etc/environment, the entrypoint is /etc/rc.
make_enroot_squashfs() {
    local tree=$1/tree applet
    rm -rf "$tree"
    mkdir -p "$tree"/{bin,etc,tmp}
    install -m 0755 /bin/busybox "$tree/bin/busybox"
    for applet in sh cat echo env id hostname; do ln -s busybox "$tree/bin/$applet"; done
    echo enroot-squashfs >"$tree/etc/slipway-image"
    printf 'PATH=/bin\nFROM_ENROOT="set by the image"\n' >"$tree/etc/environment"
    printf '#!/bin/sh\necho "rc ran on $(hostname)"\nexport FROM_RC=yes\nexec "$@"\n' >"$tree/etc/rc"
    chmod 0755 "$tree/etc/rc"
    mksquashfs "$tree" "$1/image.sqsh" -noappend -quiet -all-root >/dev/null
    chown slwuser: "$1/image.sqsh"
    rm -rf "$tree"
}

test_enroot_squashfs_image() {
    local dir
    dir=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-sqsh
    mkdir -p "$dir"
    chown slwuser: "$dir"
    make_enroot_squashfs "$dir"
    run_job srun -N2 --ntasks-per-node=2 -K --container-image="$dir/image.sqsh" \
        sh -c 'echo "$SLURM_PROCID $(cat /etc/slipway-image) $FROM_ENROOT [$FROM_RC]"'
    assert_success
    assert_equal 4 "$(grep -c '^[0-3] enroot-squashfs set by the image \[\]$' <<<"$output")" "tasks in the squashfs image"
    run_job srun -N2 -K --container-image="$dir/image.sqsh" --container-entrypoint \
        --container-entrypoint-log sh -c 'echo "task $SLURM_PROCID [$FROM_RC]"'
    assert_success
    assert_equal 2 "$(grep -c '^task [01] \[yes\]$' <<<"$output")" "tasks after /etc/rc"
    assert_equal 2 "$(grep -c '^rc ran on node' <<<"$output")" "/etc/rc runs (one per node)"
    run_job salloc -N1 --time=2 --container-image="$dir/image.sqsh" srun -K cat /etc/slipway-image
    assert_success
    assert_output_contains "enroot-squashfs"
    # Saved as an OCI archive, changes and the image's Env included.
    run_job srun -N1 -K --container-image="$dir/image.sqsh" --container-writable \
        --container-save="$dir/saved.tar" sh -c 'echo changed >/etc/slipway-image'
    assert_success
    run_job srun -N1 -K --container-image="$dir/saved.tar" sh -c 'echo "$(cat /etc/slipway-image) $FROM_ENROOT"'
    assert_success
    assert_output "changed set by the image"
    rm -rf "$dir"
}
