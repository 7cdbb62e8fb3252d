# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-mounts=SRC[:DST[:FLAGS]][,...] on the sandbox: host directories bound into the
# container on every node, read-write unless `ro`, always nosuid,nodev (noexec on request, flags
# joined by '+' as in pyxis), DST defaulting to SRC, a
# relative SRC taken from the submission directory, submounts carried unless `norbind`, and a
# symlink in the container that cannot lead a destination out of the root. srun, #SBATCH, salloc.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    DATA_NAME=slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-mounts
    DATA=$(job_user_home)/$DATA_NAME
    rm -rf "$DATA"
    mkdir -p "$DATA"/{a,b,escape,sub}
    echo from-host >"$DATA/a/in"
    echo from-b >"$DATA/b/in"
    chown -R slwuser: "$DATA"
}

teardown_file() { rm -rf "$DATA"; }

slurmd_pid() { cat "$SANDBOX_DIR/run/slurmd-$1.pid"; }

test_srun_binds_a_dir_read_write_on_every_node() {
    rm -f "$DATA"/a/out-*
    run_job srun -N4 -K --container-image="$BUSYBOX" --container-mounts="$DATA/a:/data" \
        sh -c 'cat /data/in && echo "$SLURM_PROCID" >/data/out-$SLURM_PROCID'
    assert_success
    assert_equal 4 "$(grep -cx from-host <<<"$output")" "tasks reading the bind"
    local i
    for i in 0 1 2 3; do assert_equal "$i" "$(cat "$DATA/a/out-$i")" "what task $i wrote through the bind"; done
}

test_ro_flag_and_nosuid_nodev() {
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-mounts="$DATA/a:/data:ro" \
        sh -c 'touch /data/nope 2>&1; grep " /data " /proc/self/mountinfo'
    assert_success
    assert_equal 2 "$(grep -c 'Read-only file system' <<<"$output")" "refused writes"
    assert_no_file "$DATA/a/nope"
    local mi
    mi=$(grep ' /data ' <<<"$output")
    [[ -n $mi ]] || fail "/data is not a mount point in the container:"$'\n'"$output"
    while read -r line; do
        [[ $line =~ \ /data\ (ro|[^ ]*,ro)[,\ ] ]] || fail "/data is not read-only: $line"
        [[ $line == *nosuid* && $line == *nodev* ]] || fail "/data is not nosuid,nodev: $line"
    done <<<"$mi"
    run_job srun -N1 -K --container-image="$BUSYBOX" --container-mounts="$DATA/a:/data:rw" \
        sh -c 'grep " /data " /proc/self/mountinfo'
    assert_success
    [[ $output == *nosuid* && $output == *nodev* ]] || fail "a rw bind is not nosuid,nodev: $output"
}

# pyxis's flag syntax (its --help shows "ro+rprivate"): flags joined by '+', noexec applied,
# propagation other than private refused at submission.
test_pyxis_flags_and_noexec() {
    printf '#!/bin/sh\necho ran-from-bind\n' >"$DATA/a/tool.sh"
    chmod 0755 "$DATA/a/tool.sh"
    chown slwuser: "$DATA/a/tool.sh"
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-mounts="$DATA/a:/data:ro+rprivate" /data/tool.sh
    assert_success
    assert_equal 2 "$(grep -cx ran-from-bind <<<"$output")" "tasks running a script from the bind"
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-mounts="$DATA/a:/data:ro+noexec" \
        sh -c '/data/tool.sh 2>&1; grep " /data " /proc/self/mountinfo'
    assert_success
    assert_output_not_contains "ran-from-bind"
    assert_equal 2 "$(grep -c 'Permission denied' <<<"$output")" "refused execs"
    assert_equal 2 "$(grep -c ' /data ro,.*noexec' <<<"$output")" "ro,noexec mounts"
    run_job srun -N1 -K --container-image="$BUSYBOX" --container-mounts="$DATA/a:/data:rslave" true
    assert_failure
    assert_output_contains "slipway: --container-mounts='$DATA/a:/data:rslave' asks for propagation 'rslave'; container mounts are always private here: use private or drop it"
    rm -f "$DATA/a/tool.sh"
}

# pyxis's special sources: tmpfs:DST mounts a fresh tmpfs, umount:DST removes a mount (here the
# node's /tmp, which the container otherwise shares: the image's own /tmp shows again).
test_tmpfs_and_umount_sources() {
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-workdir=/ \
        --container-mounts=tmpfs:/scratch,umount:/tmp sh -c '
            echo data >/scratch/f && cat /scratch/f
            grep -c " /scratch .* - tmpfs " /proc/self/mountinfo
            grep -c " /tmp " /proc/self/mountinfo || true'
    assert_success
    assert_equal 2 "$(grep -cx data <<<"$output")" "tasks writing the tmpfs"
    assert_equal "1 1 0 0" "$(grep -x '[0-9]' <<<"$output" | sort -r | tr '\n' ' ' | sed 's/ $//')" \
        "tmpfs at /scratch, nothing at /tmp (two tasks)"
    run_job srun -N1 -K --container-image="$BUSYBOX" --container-mounts=umount:/no/such true
    assert_failure
    assert_output_contains "--container-mounts=umount:/no/such: nothing is mounted at /no/such in the container"
}

test_several_mounts_and_default_destination() {
    # Without the home directory bound, $DATA/b is visible only through its own bind.
    run_job srun -N2 -K --container-image="$BUSYBOX" --no-container-mount-home --container-workdir=/ \
        --container-mounts="$DATA/a:/data,$DATA/b" sh -c "cat /data/in $DATA/b/in; ls $DATA"
    assert_success
    assert_equal 2 "$(grep -cx from-host <<<"$output")" "/data/in"
    assert_equal 2 "$(grep -cx from-b <<<"$output")" "$DATA/b/in"
    assert_output_not_contains "escape"     # only b of $DATA is there
}

test_relative_source_is_from_the_submission_directory() {
    run_job srun -N2 -K --container-image="$BUSYBOX" --no-container-mount-home \
        --container-mounts="$DATA_NAME/a:/data" --container-workdir=/ cat /data/in
    assert_success
    assert_equal 2 "$(grep -cx from-host <<<"$output")" "tasks reading the relative bind"
}

test_source_missing_on_the_nodes_fails_naming_the_node() {
    # /tmp of the host (where srun runs) is not the nodes' /tmp.
    local src=/tmp/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-hostonly
    mkdir -p "$src"
    run_job srun -N1 -w node2 -K --container-image="$BUSYBOX" --container-mounts="$src:/data" true
    rmdir "$src"
    assert_failure
    assert_output_contains "slipway: --container-mounts: source path does not exist: '$src' on node2; create it or fix the path"
}

# rbind (the default) carries a submount of the source along; norbind leaves an empty directory,
# or, where the kernel forbids uncovering a submount locked by the user namespace, fails with a line
# that names the option and the fix (not a bare errno).
test_rbind_carries_submounts_norbind_does_not() {
    local node=node1 pid out_rbind status_rbind
    pid=$(slurmd_pid $node)
    nsenter -t "$pid" -m sh -c "mount -t tmpfs slipway-test-sub $DATA/sub && echo in-submount >$DATA/sub/file" \
        || fail "cannot mount a submount on $node"
    run_job srun -N1 -w $node -K --container-image="$BUSYBOX" --container-mounts="$DATA:/d" \
        sh -c 'cat /d/sub/file'
    out_rbind=$output status_rbind=$status
    run_job srun -N1 -w $node -K --container-image="$BUSYBOX" --container-mounts="$DATA:/d:ro+norbind" \
        sh -c 'ls -A /d/sub; echo end'
    nsenter -t "$pid" -m umount "$DATA/sub"
    assert_equal 0 "$status_rbind" "status with rbind"
    assert_equal "in-submount" "$out_rbind" "the submount's file with rbind"
    if ((status == 0)); then
        assert_output "end"
    else
        assert_output_matches "slipway: .*--container-mounts.*norbind"
    fi
}

# Symlinks in a (named, writable) container, one climbing far above / and one absolute, both to a
# path that exists on the host and in the container: a bind destination below them resolves inside
# the container's root, and nothing is created on the host.
test_symlink_cannot_lead_a_destination_outside() {
    run_job salloc -N1 -w node3 --time=2 sh -c "
        srun -K --container-image=$BUSYBOX --container-name=symlinks:create --no-container-mount-home \
            --container-workdir=/ sh -c 'mkdir -p $DATA/escape && ln -s ../../../../../..$DATA/escape /up &&
                                         ln -s $DATA/escape /abs' &&
        srun -K --container-name=symlinks --no-container-mount-home --container-workdir=/ \
            --container-mounts=$DATA/a:/up/in-up,$DATA/a:/abs/in-abs \
            sh -c 'cat /up/in-up/in /abs/in-abs/in; ls $DATA/escape'"
    assert_no_file "$DATA/escape/in-up"
    assert_no_file "$DATA/escape/in-abs"
    assert_success
    assert_equal 2 "$(grep -cx from-host <<<"$output")" "files read through the binds"
}

# A container whose /home and /evil are symlinks into the node's /tmp (bound into every container):
# the home's mount point, a bind's and a tmpfs's are never made there; each step fails in one line
# naming the symlink, and the node's /tmp directory stays empty (issue 30).
test_image_symlinks_never_create_on_the_host() {
    local x=slipway-evil-$$
    run_job salloc -N1 -w node3 --time=2 sh -c "
        srun -K sh -c 'rm -rf /tmp/$x; mkdir /tmp/$x' &&
        srun -K --container-image=$BUSYBOX --container-name=evil:create --no-container-mount-home \
            --container-workdir=/ sh -c 'rm -rf /home && ln -s /tmp/$x /home && ln -s /tmp/$x /evil' &&
        { srun -K --container-name=evil --container-mount-home --container-workdir=/ true; echo rc=\$?
          srun -K --container-name=evil --no-container-mount-home --container-workdir=/ \
              --container-mounts=$DATA/a:/evil/in true; echo rc=\$?
          srun -K --container-name=evil --no-container-mount-home --container-workdir=/ \
              --container-mounts=tmpfs:/evil/t true; echo rc=\$?; }
        srun -K sh -c 'ls -A /tmp/$x | sed \"s/^/made: /\"; rm -rf /tmp/$x'"
    echo "$output" >&2
    assert_equal 3 "$(grep -c '^rc=[1-9]' <<<"$output")" "steps refused"
    assert_output_contains "leads out of the image, onto a filesystem bound from the host"
    assert_equal 0 "$(grep -c '^made: ' <<<"$output")" "entries made in the node's /tmp"
}

test_sbatch_mounts_reach_every_step() {
    local script
    script=$(job_user_home)/$DATA_NAME/job.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-mounts=$DATA/a:/data:ro
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'echo "step \$SLURM_PROCID \$(cat /data/in)"'
EOS
    run_batch "$script"
    echo "$output" >&2
    assert_success
    assert_equal 2 "$(grep -c '^step [01] from-host$' <<<"$output")" "steps reading the bind"
}

test_salloc_mounts_reach_every_step() {
    run_job salloc -N2 --time=2 --container-image="$BUSYBOX" --container-mounts="$DATA/b:/data" \
        srun -K -n2 cat /data/in
    assert_success
    assert_equal 2 "$(grep -cx from-b <<<"$output")" "steps reading the bind"
}
