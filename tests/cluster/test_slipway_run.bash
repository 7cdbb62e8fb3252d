# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# `slipway run` (issue 4): the plugin's container with no admin install, standalone and as the
# tasks of an srun, where the tasks of a node share one container (and the mounts made in it) and
# nothing outlives the step;
# --container-entrypoint runs once per node and --container-save saves on the first node, as
# with the plugin.

setup_file() {
    require_sandbox
    require_images busybox entrypoint
    BUSYBOX=$(image_ref busybox)
    ENTRYPOINT=$(image_ref entrypoint)
    local bin=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}/launcher/slipway
    [[ -x $bin ]] || fail "slipway is not built ($bin)"
    # The nodes cannot see a build under /tmp (each has its own): run a copy from the user's home.
    install -m 0755 -o slwuser "$bin" "$(job_user_home)/slipway"
    mkdir -p /srv/slipway-test && echo hello >/srv/slipway-test/f && chmod -R a+rX /srv/slipway-test
    export SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000
}

teardown_file() { rm -rf /srv/slipway-test "$(job_user_home)/slipway" "$(job_user_home)/.slipway-test-cache"; }

test_standalone_run_uses_the_same_options() {
    run_job env SLIPWAY_CACHE_DIR="$(job_user_home)/.slipway-test-cache" \
        ./slipway run --container-image="$BUSYBOX" --container-mounts=/srv/slipway-test:/data:ro \
        --container-workdir=/data -- sh -c 'cat /etc/slipway-image f; pwd; touch g 2>&1; id -u'
    assert_success
    assert_equal "busybox hello /data" "$(head -n 3 <<<"$output" | tr '\n' ' ' | sed 's/ $//')" "output"
    assert_output_contains "Read-only file system"
    assert_equal "$(id -u slwuser)" "${lines[-1]}" "uid inside"
}

test_tasks_of_a_node_share_one_container_under_srun() {
    run_job srun -N2 --ntasks-per-node=3 -K ./slipway run --container-image="$BUSYBOX" -- \
        sh -c 'echo "$(hostname) $(readlink /proc/self/ns/user) $(readlink /proc/self/ns/mnt) $(cat /etc/slipway-image)"; sleep 1'
    assert_success
    assert_line_count 6
    # One user namespace per node (shared memory and CMA work between its tasks), a mount
    # namespace per task (the tasks overlap in time, so no namespace number is reused).
    assert_equal 2 "$(awk '{print $1, $2}' <<<"$output" | sort -u | wc -l)" "user namespaces"
    assert_equal 6 "$(awk '{print $3}' <<<"$output" | sort -u | wc -l)" "mount namespaces"
    assert_equal 6 "$(grep -c ' busybox$' <<<"$output")" "tasks inside busybox"
}

# The tasks of a node resolve the tag once per step (the first pins the digest for the others):
# one manifest request per node, not one per task.
# As with the plugin (and pyxis's one namespace), a mount one task makes in the container its
# sibling sees (test_opt_name.bash has the plugin's cases).
test_a_mount_one_task_makes_its_sibling_sees() {
    run_job srun -N1 -n2 -K ./slipway run --container-image="$BUSYBOX" --container-remap-root \
        --container-writable -- sh -c '
            if [ "$SLURM_LOCALID" = 0 ]; then mkdir /mymnt && mount -t tmpfs none /mymnt && echo made >/mymnt/f; fi
            i=0; while [ ! -e /mymnt/f ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
            echo "task $SLURM_LOCALID $(cat /mymnt/f 2>&1)"'
    assert_success
    assert_equal 2 "$(grep -Ec '^task [01] made$' <<<"$output")" "tasks that see the tmpfs"
}

test_tasks_of_a_node_resolve_the_tag_once() {
    local log=$SANDBOX_DIR/log/registry-access.log mark
    mark=$(wc -l <"$log")
    run_job srun -N2 --ntasks-per-node=4 -K ./slipway run --container-image="$BUSYBOX" -- cat /etc/slipway-image
    assert_success
    assert_equal 8 "$(grep -cx busybox <<<"$output")" "tasks inside busybox"
    # Per node a GET, or a HEAD once its cache remembers the tag (image/tag_memo.h), or both when
    # the tag moved since: never one per task.
    local since gets heads
    since=$(tail -n +"$((mark + 1))" "$log")
    gets=$(grep -c '"GET /v2/slipway/busybox/manifests/' <<<"$since" || true)
    heads=$(grep -c '"HEAD /v2/slipway/busybox/manifests/' <<<"$since" || true)
    ((gets <= 2 && heads <= 2 && gets + heads >= 2)) ||
        fail "manifest requests for 2 nodes and 8 tasks: $gets GET, $heads HEAD"
}

test_nothing_outlives_the_step() {
    run_job srun -N2 --ntasks-per-node=2 -K ./slipway run --container-image="$BUSYBOX" -- sh -c 'echo $SLURM_JOB_ID'
    assert_success
    local job=${lines[0]}
    [[ $job =~ ^[0-9]+$ ]] || fail "no job id in: $output"
    sleep 0.6  # the holder notices its last task within 0.2 s
    local holders
    holders=$(sandbox_pids slipway-holder)
    [[ -z $holders ]] || fail "holders left: $holders"
    # This job's only: a holder killed by an earlier 'slipway-sandbox down' leaves its own behind.
    local left
    left=$(ls -d "$SANDBOX_DIR"/nodes/node*/var-tmp/slipway-"$(id -u slwuser)"/run/*-"$job".* 2>/dev/null || true)
    [[ -z $left ]] || fail "run directories left: $left"
}

# A holder killed with SIGKILL cannot remove its step's run directory; the first task of the
# node's next step does, and leaves alone those of running steps and of other nodes (a cache on a
# shared file system holds every node's).
test_a_killed_holders_run_directory_goes_with_the_next_step() {
    local run=$SANDBOX_DIR/nodes/node1/var-tmp/slipway-$(id -u slwuser)/run d f
    local stale=$run/node1-999999.0 other=$run/node9-999999.0
    # A running step on node1 first: its directory must survive the sweep.
    "$SANDBOX" exec -- srun -N1 -w node1 -K ./slipway run --container-image="$BUSYBOX" -- sleep 4 \
        >/dev/null 2>&1 &
    local running=$! deadline=$((SECONDS + 20)) live_dir=""
    while [[ -z $live_dir ]] && ((SECONDS < deadline)); do
        [[ -n $(sandbox_pids slipway-holder) ]] && live_dir=$(ls -d "$run"/node1-*.* 2>/dev/null | tail -n1)
        sleep 0.1
    done
    [[ -d $live_dir ]] || fail "the running step's holder and run directory did not appear"
    for d in "$stale" "$other"; do
        install -d -o slwuser -m 0700 "$d"
        for f in lock users image; do install -o slwuser -m 0600 /dev/null "$d/$f"; done
        echo 2147483646 >"$d/holder"  # no such process
        chown slwuser "$d/holder"
    done
    run_job srun -N1 -w node1 -K ./slipway run --container-image="$BUSYBOX" -- true
    assert_success
    [[ ! -e $stale ]] || fail "the killed holder's run directory is still there: $(ls -la "$stale")"
    [[ -d $other ]] || fail "another node's run directory was removed"
    [[ -d $live_dir ]] || fail "the running step's run directory was removed"
    wait "$running" || fail "the running step failed"
    rm -rf "$other"
}

test_remap_root_and_bad_options() {
    run_job srun -N1 -K ./slipway run --container-image="$BUSYBOX" --container-remap-root -- \
        sh -c 'id -u; chown 7 /etc/slipway-image && echo chown-ok'
    assert_success
    assert_output "$(printf '0\nchown-ok')"
    run_job ./slipway run --container-image="$BUSYBOX" --container-mounts=/srv:relative -- true
    assert_failure
    assert_output "slipway: --container-mounts='/srv:relative' needs an absolute destination inside the container, e.g. /data:/data"
    run_job ./slipway run --container-bogus -- true
    assert_failure 2
    assert_output_contains "unknown option '--container-bogus'"
    run_job ./slipway run --container-image="$BUSYBOX" --dl-host-libs=mpi -- true
    assert_failure 2
    assert_output "slipway: run: --dl-host-libs is applied by the Slurm plugin (srun --dl-host-libs, spank_slipway(8)), not by 'slipway run'; drop it here"
}

test_entrypoint_standalone_and_once_per_node_under_srun() {
    run_job ./slipway run --container-image="$ENTRYPOINT" --container-entrypoint -- \
        sh -c 'echo "[$FROM_ENTRYPOINT]"'
    assert_success
    assert_output "[set by the entrypoint]"
    run_job ./slipway run --container-image="$ENTRYPOINT" -- sh -c 'echo "[$FROM_ENTRYPOINT]"'
    assert_success
    assert_output "[]"
    run_job srun -N2 --ntasks-per-node=3 -K ./slipway run --container-image="$ENTRYPOINT" \
        --container-entrypoint --container-entrypoint-log -- sh -c 'echo "task $SLURM_PROCID: $FROM_ENTRYPOINT"'
    assert_success
    assert_equal 6 "$(grep -c '^task [0-5]: set by the entrypoint$' <<<"$output")" "tasks with the variable"
    assert_equal 2 "$(grep -c '^entrypoint ran on node[1-4] as ' <<<"$output")" "entrypoint runs (one per node)"
}

test_failing_entrypoint_fails_every_task() {
    run_job env ENTRYPOINT_FAIL=1 srun -N2 --ntasks-per-node=2 -K ./slipway run \
        --container-image="$ENTRYPOINT" --container-entrypoint --container-env=ENTRYPOINT_FAIL \
        -- echo should-not-run
    assert_failure
    assert_output_not_contains "should-not-run"
    assert_equal 4 "$(grep -c "slipway: cannot start the container: the image's entrypoint (/entrypoint.sh) failed with status 3: entrypoint: failing as asked; fix the image or run with --no-container-entrypoint" <<<"$output")" \
        "tasks that report the failure"
}

test_save_standalone_and_under_srun() {
    local out
    out=$(job_user_home)/slipway-run-saved-$$.tar
    rm -f "$out"
    run_job ./slipway run --container-image="$BUSYBOX" --container-writable --container-save="$out" -- \
        sh -c 'echo standalone >/etc/slipway-image'
    assert_success
    run_job ./slipway run --container-image="$out" -- cat /etc/slipway-image
    assert_success
    assert_output "standalone"
    rm -f "$out"
    # Every task of the first node writes; its last task saves, with the holder still there.
    run_job srun -N2 --ntasks-per-node=2 -K ./slipway run --container-image="$BUSYBOX" \
        --container-writable --container-save="$out" -- sh -c 'echo "$SLURM_NODEID" >/etc/slipway-image; touch /task-$SLURM_PROCID'
    assert_success
    run_job ./slipway run --container-image="$out" -- sh -c 'cat /etc/slipway-image; ls / | grep -c "^task-"'
    assert_success
    assert_equal "0 2" "$(tr '\n' ' ' <<<"$output" | sed 's/ $//')" "saved node and its tasks' files"
    rm -f "$out"
    sleep 0.6
    [[ -z $(sandbox_pids slipway-holder) ]] || fail "holders left after the save"
}

test_image_workingdir_and_cmd() {
    run_job ./slipway run --container-image="$ENTRYPOINT" -- pwd
    assert_success
    assert_output /srv/app
    # No command: the image's Cmd (/bin/sh, here reading its script from stdin).
    run_job sh -c 'echo "echo from-cmd in \$(pwd)" | ./slipway run --container-image='"$ENTRYPOINT"
    assert_success
    assert_output "from-cmd in /srv/app"
}

# The plugin's DL environment, from the SLURM_* variables: torch.distributed's env:// works the same
# under `srun slipway run` as under `srun --container-image`.
test_dl_environment_under_srun() {
    run_job srun -N2 --ntasks-per-node=2 -K ./slipway run --container-image="$BUSYBOX" -- sh -c \
        'echo "dl $SLURM_PROCID $RANK $SLURM_LOCALID $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $SLURM_NODEID $NODE_RANK $MASTER_ADDR $MASTER_PORT $(hostname)"'
    assert_success
    local line procid rank localid local_rank world local_world nodeid node addr port host masters=() ranks=()
    while read -r line; do
        read -r _ procid rank localid local_rank world local_world nodeid node addr port host <<<"$line"
        [[ $rank == "$procid" && $local_rank == "$localid" && $node == "$nodeid" ]] ||
            fail "RANK, LOCAL_RANK or NODE_RANK differ from Slurm's: $line"
        [[ $world == 4 && $local_world == 2 ]] || fail "bad sizes: $line"
        [[ $node != 0 || $addr == "$host" ]] || fail "MASTER_ADDR is not the step's first node: $line"
        [[ $port =~ ^[0-9]+$ ]] || fail "bad MASTER_PORT: $line"
        masters+=("$addr:$port")
        ranks+=("$rank")
    done < <(grep '^dl ' <<<"$output")
    assert_equal "0 1 2 3" "$(printf '%s\n' "${ranks[@]}" | sort -n | tr '\n' ' ' | sed 's/ $//')" "ranks"
    assert_equal 1 "$(printf '%s\n' "${masters[@]}" | sort -u | wc -l)" "distinct MASTER_ADDR:MASTER_PORT"
    run_job env SLIPWAY_MASTER_PORTS=31000-31000 srun -N1 -K ./slipway run --container-image="$BUSYBOX" -- \
        sh -c 'echo "port $MASTER_PORT"'
    assert_success
    assert_output_contains "port 31000"
}

# The image of a running `slipway run` is in use: `slipway gc --keep 0` and `rm` leave it (they
# used to delete the rootfs under the running container), and remove it once the command ended.
test_gc_and_rm_leave_the_image_of_a_running_command() {
    local cache held i
    cache=$(job_user_home)/.slipway-test-cache
    held=$(mktemp)
    run_job env SLIPWAY_CACHE_DIR="$cache" ./slipway import "$BUSYBOX"
    assert_success
    "$SANDBOX" exec -- env SLIPWAY_CACHE_DIR="$cache" timeout 60 ./slipway run \
        --container-image="$BUSYBOX" -- sh -c 'sleep 6; cat /etc/slipway-image' >"$held" 2>&1 &
    for ((i = 0; i < 50; i++)); do
        run_job env SLIPWAY_CACHE_DIR="$cache" ./slipway images
        [[ $output == *" yes "*"$BUSYBOX"* ]] && break
        sleep 0.2
    done
    assert_output_matches " yes +$BUSYBOX"
    run_job env SLIPWAY_CACHE_DIR="$cache" ./slipway gc --keep 0
    assert_success
    assert_output_contains "(the rest is in use by running steps)"
    run_job env SLIPWAY_CACHE_DIR="$cache" ./slipway rm "$BUSYBOX"
    assert_failure 1
    assert_output_contains "is in use by a running step"
    wait
    assert_equal "busybox" "$(tail -n 1 "$held")" "the running command read its image"
    rm -f "$held"
    run_job env SLIPWAY_CACHE_DIR="$cache" ./slipway rm "$BUSYBOX"
    assert_success
}

# The tasks of a node share one container, so one image: a task that names another one is refused
# in one line instead of joining a container of the wrong image.
test_tasks_of_a_step_naming_different_images_are_refused() {
    run_job srun -N1 --ntasks-per-node=2 -K sh -c "if [ \$SLURM_PROCID = 0 ]; then img=$BUSYBOX; else sleep 1; img=$ENTRYPOINT; fi; \
        ./slipway run --container-image=\$img -- sh -c 'cat /etc/slipway-image; sleep 3'"
    assert_failure
    assert_output_contains "busybox"
    assert_output_matches "the container of this step on node[0-9]* runs image sha256:[0-9a-f]*, not sha256:[0-9a-f]* \('$ENTRYPOINT'\): the tasks of a step on a node share one container"
}
