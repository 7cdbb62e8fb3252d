# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Squashfs images are mounted, never unpacked (issue 15, item 1): --container-image=FILE.sqsh
# becomes the overlay's lower layer through squashfuse_ll inside the job's own user namespace,
# through the plugin and through `slipway run`; the files are the user's (or root's, remapped) as
# an unpacked image's are; writable, named containers and --container-save=*.sqsh work on it. A
# truncated or damaged file is one line and leaves nothing; without /dev/fuse access the image is
# unpacked as before, with one line saying why; after scancel or kill -9 of the holder no
# squashfuse_ll is left on any node.

setup_file() {
    require_sandbox
    require_plugin
    UID_=$(id -u slwuser)
    DIR=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-sqmount
    rm -rf "$DIR"
    mkdir -p "$DIR"
    make_image "$DIR"
    local bin=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}/launcher/slipway
    [[ -x $bin ]] || fail "slipway is not built ($bin)"
    install -m 0755 "$bin" "$DIR/slipway"
    chown -R slwuser: "$DIR"
    chmod 0666 /dev/fuse   # as the sandbox and Debian leave it; a failed test may have changed it
}

teardown_file() {
    chmod 0666 /dev/fuse
    rm -rf "$DIR"
}

# An enroot-style image: busybox, a marker, /etc/environment, a root-only directory.
make_image() {
    local tree=$1/tree applet
    mkdir -p "$tree"/{bin,etc,tmp,root}
    install -m 0755 /bin/busybox "$tree/bin/busybox"
    for applet in sh cat echo env id grep stat sleep ls touch true; do ln -s busybox "$tree/bin/$applet"; done
    echo squashfs-mounted >"$tree/etc/slipway-image"
    printf 'PATH=/bin\nFROM_ENROOT="set by the image"\n' >"$tree/etc/environment"
    chmod 0700 "$tree/root"
    echo secret >"$tree/root/f"
    mksquashfs "$tree" "$1/image.sqsh" -noappend -quiet -all-root >/dev/null
    rm -rf "$tree"
}

# squashfuse_ll daemons on this sandbox's nodes (zombies aside: they hold nothing).
daemons() {
    local pid
    for pid in $(sandbox_pids squashfuse_ll); do
        [[ $(ps -o stat= -p "$pid" 2>/dev/null) == Z* ]] || echo "$pid"
    done
    return 0
}
no_daemons() { [[ -z $(daemons) ]]; }
daemons_are() { [[ $(daemons | wc -l) -eq $1 ]]; }

# Published images in the nodes' caches (all nodes together).
cached_images() { ls "$SANDBOX_DIR"/nodes/node*/var-tmp/slipway-"$UID_"/images 2>/dev/null | wc -l; }

test_the_image_is_mounted_not_unpacked() {
    local before
    before=$(cached_images)
    run_job srun -N2 --ntasks-per-node=2 -K --container-image="$DIR/image.sqsh" \
        sh -c 'echo "$(cat /etc/slipway-image) $(stat -c %u /etc/slipway-image) $(cat /root/f) [$FROM_ENROOT] $(grep -c "^overlay / overlay .*lowerdir=[^,]*/mnt/lower," /proc/mounts)"'
    assert_success
    assert_equal 4 "$(grep -cx "squashfs-mounted $UID_ secret \[set by the image\] 1" <<<"$output")" \
        "tasks in the mounted image, its files the user's"
    assert_equal "$before" "$(cached_images)" "images unpacked into the node caches"
    wait_until 5 no_daemons || fail "squashfuse_ll left on the nodes: $(daemons)"
}

test_remapped_writable_and_named_containers_work_on_the_mount() {
    run_job srun -N2 -K --container-image="$DIR/image.sqsh" --container-remap-root --container-writable \
        sh -c 'id -u; stat -c %u /etc/slipway-image; echo changed >/etc/slipway-image && cat /etc/slipway-image'
    assert_success
    assert_equal "0 0 0 0 changed changed" "$(sort <<<"$output" | tr '\n' ' ' | sed 's/ $//')" "remapped, written"
    run_job salloc -N1 --time=2 sh -c "srun -K --container-image='$DIR/image.sqsh' --container-name=sq \
        sh -c 'echo kept >/root/new' && srun -K --container-name=sq sh -c 'cat /root/new /etc/slipway-image'"
    assert_success
    assert_equal "kept squashfs-mounted" "$(grep -x -e kept -e squashfs-mounted <<<"$output" | tr '\n' ' ' | sed 's/ $//')" \
        "a named container's second step"
    wait_until 5 no_daemons || fail "squashfuse_ll left on the nodes: $(daemons)"
}

test_save_as_squashfs_from_a_mounted_image() {
    rm -f "$DIR/saved.sqsh"
    run_job srun -N1 -K --container-image="$DIR/image.sqsh" --container-writable \
        --container-save="$DIR/saved.sqsh" sh -c 'echo saved >/etc/slipway-image'
    assert_success
    run_job srun -N2 -K --container-image="$DIR/saved.sqsh" sh -c 'cat /etc/slipway-image; stat -c %u /etc/slipway-image'
    assert_success
    assert_equal "$UID_ $UID_ saved saved" "$(sort <<<"$output" | tr '\n' ' ' | sed 's/ $//')" "the saved file, mounted"
    # An OCI archive needs layers: the image is unpacked for it, and the line says why.
    run_job srun -N1 -K --container-image="$DIR/image.sqsh" --container-save="$DIR/saved.tar" true
    assert_success
    assert_output_contains "is unpacked, not mounted: --container-save=$DIR/saved.tar writes an OCI archive"
    assert_file_exists "$DIR/saved.tar"
}

test_slipway_run_mounts_it_too() {
    local probe='echo "$(cat /etc/slipway-image) $(stat -c %u /etc/slipway-image) $(grep -c "lowerdir=[^,]*/mnt/lower," /proc/mounts)"'
    run_job sh -c "cd '$DIR' && ./slipway run --container-image=./image.sqsh -- sh -c '$probe'"
    assert_success
    assert_output "squashfs-mounted $UID_ 1"
    run_job sh -c "cd '$DIR' && srun -N2 --ntasks-per-node=2 -K ./slipway run --container-image=$DIR/image.sqsh -- sh -c '$probe'"
    assert_success
    assert_equal 4 "$(grep -cx "squashfs-mounted $UID_ 1" <<<"$output")" "tasks of slipway run under srun"
    wait_until 5 no_daemons || fail "squashfuse_ll left on the nodes: $(daemons)"
}

test_truncated_and_damaged_files_are_one_line_and_leave_nothing() {
    local used t0
    head -c 100000 "$DIR/image.sqsh" >"$DIR/cut.sqsh"
    cp "$DIR/image.sqsh" "$DIR/bad.sqsh"
    used=$(od -An -t u8 -j 40 -N 8 "$DIR/image.sqsh" | tr -d ' ')
    dd if=/dev/zero of="$DIR/bad.sqsh" bs=1 seek=$((used - 300)) count=300 conv=notrunc status=none
    chown slwuser: "$DIR"/{cut,bad}.sqsh
    t0=$(now)
    run_job srun -N2 -K --container-image="$DIR/cut.sqsh" true
    assert_failure
    assert_output_matches "squashfs image '$DIR/cut.sqsh' is truncated: 100000 bytes of the $used its superblock names; copy it again"
    run_job srun -N2 -K --container-image="$DIR/bad.sqsh" true
    assert_failure
    assert_output_matches "cannot read squashfs image '$DIR/bad.sqsh': rdsquashfs: "
    run_job sh -c "cd '$DIR' && ./slipway run --container-image=./cut.sqsh -- true"
    assert_failure
    assert_line_count 1
    assert_output_contains "is truncated"
    assert_less "$(elapsed "$t0")" 15 "seconds for three refusals"
    wait_until 5 no_daemons || fail "squashfuse_ll left on the nodes: $(daemons)"
    [[ -z $(ls "$DIR" | grep -v -e '^image.sqsh$' -e '^cut.sqsh$' -e '^bad.sqsh$' -e '^slipway$' -e '^saved') ]] ||
        fail "files left beside the images: $(ls "$DIR")"
}

test_without_fuse_access_the_image_is_unpacked_with_one_line() {
    chmod 0600 /dev/fuse
    run_job srun -N2 -K --container-image="$DIR/image.sqsh" \
        sh -c 'echo "$(cat /etc/slipway-image) $(grep -c "lowerdir=[^,]*/mnt/lower," /proc/mounts)"'
    chmod 0666 /dev/fuse
    assert_success
    assert_equal 2 "$(grep -cx "squashfs-mounted 0" <<<"$output")" "tasks in the unpacked image"
    assert_equal 2 "$(grep -c "squashfs image '$DIR/image.sqsh' is unpacked, not mounted: /dev/fuse: Permission denied" <<<"$output")" \
        "lines saying why (one per node)"
    # slipway doctor says the same, and is content again once users may open /dev/fuse.
    chmod 0600 /dev/fuse
    run_job "$DIR/slipway" doctor
    chmod 0666 /dev/fuse
    assert_output_contains "warn  fuse: squashfs images are unpacked, not mounted: /dev/fuse: Permission denied"
    run_job "$DIR/slipway" doctor
    assert_output_contains "ok    fuse: squashfs images are mounted"
}

# A 2-node job sleeping in the image, its squashfuse_ll running on both nodes: sets $jobid.
start_sleeping_job() {
    run_job sbatch --parsable -N2 --time=2 -o /dev/null \
        --wrap "srun -K --container-image=$DIR/image.sqsh sleep 300"
    assert_success
    jobid=${output%%;*}
    trap "\"\$SANDBOX\" exec -- scancel $jobid" EXIT
    wait_until 20 daemons_are 2 || fail "squashfuse_ll running: $(daemons | wc -l), expected 2"
}

test_nothing_is_left_after_scancel_or_kill_of_the_holder() {
    local jobid holders
    start_sleeping_job
    run_job scancel "$jobid"
    wait_until 20 no_daemons || fail "squashfuse_ll left 20 s after scancel: $(daemons)"

    start_sleeping_job
    holders=$(sandbox_pids slipway-holder)
    [[ -n $holders ]] || fail "no slipway-holder on the nodes"
    kill -9 $holders
    wait_until 10 no_daemons || fail "squashfuse_ll left 10 s after kill -9 of the holders: $(daemons)"
    run_job scancel "$jobid"
    trap - EXIT
}
