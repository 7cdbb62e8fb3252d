# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The life of a node's container on the sandbox: named containers persist across the steps of a
# job and the job epilog removes them; writes (writable or named) never reach the image cache; one
# slipway-holder per node per step; after scancel of a step or a job nothing is left on any node
# (holder, job-user process, mount, runtime directory); per-task variables stay each task's own
# although the tasks of a node share one container.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox busybox-env
    BUSYBOX=$(image_ref busybox)
    ENVIMG=$(image_ref busybox-env)
    UID_=$(id -u slwuser)
    NODES=$(ls "$SANDBOX_DIR"/run/slurmd-node*.pid | sed 's|.*/slurmd-\(node[0-9]*\)\.pid|\1|' | sort -V)
}

node_cache() { echo "$SANDBOX_DIR/nodes/$1/var-tmp/slipway-$UID_"; }

# The cached rootfs of the busybox image on a node (the registry's digest of busybox:latest).
busybox_rootfs() {
    local link=$SANDBOX_DIR/registry/docker/registry/v2/repositories/slipway/busybox/_manifests/tags/latest/current/link
    echo "$(node_cache "$1")/images/$(sed 's/^sha256://' "$link")/rootfs"
}

# Every path, type, mode, size, mtime, link target and content hash of a tree.
fingerprint() {
    (cd "$1" && find . -printf '%p %y %m %s %T@ %l\n' | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort) | sha256sum
}

# Pids of the job user's processes on this sandbox's nodes (their network namespaces).
job_user_pids() {
    local node
    for node in $NODES; do
        for pid in $(ip netns pids "$SANDBOX_NETNS_PREFIX${node#node}" 2>/dev/null); do
            [[ $(stat -c %u "/proc/$pid" 2>/dev/null) == "$UID_" ]] && echo "$pid"
        done
    done
    return 0
}

# Holders on this sandbox's nodes: all of them, or those of job $1's steps ($2: only on node $2).
job_holders() {
    local p
    for p in $(sandbox_pids slipway-holder); do
        [[ -z ${1:-} || $(tr -d '\0' <"/proc/$(ps -o ppid= -p "$p" | tr -d ' ')/cmdline" 2>/dev/null) == *"[$1."* ]] || continue
        [[ -z ${2:-} || $(ip netns identify "$p") == "$SANDBOX_NETNS_PREFIX${2#node}" ]] || continue
        echo "$p"
    done
    return 0
}
count_holders() { job_holders "${1:-}" | wc -l; }


job_gone() { [[ ! $(job_field "$1" JobState) =~ ^(PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED)$ ]]; }
holders_are() { [[ $(count_holders "$2") -eq $1 ]]; }   # holders_are N JOBID

# Container mounts (the overlay, the "slipway" tmpfs, anything under the cache) in the nodes' own
# mount namespaces: there must never be any (spank_slipway(8), CONTAINERS AND CLEAN-UP).
node_container_mounts() {
    local node
    for node in $NODES; do
        grep -E " - overlay | - tmpfs slipway |/var/tmp/slipway-$UID_" \
            "/proc/$(cat "$SANDBOX_DIR/run/slurmd-$node.pid")/mountinfo" | sed "s/^/$node: /"
    done
    return 0
}

test_named_container_persists_across_steps_and_the_epilog_removes_it() {
    local script jobid node
    script=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-life-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH -N4 --ntasks-per-node=1 --time=2
srun -K --container-image=$BUSYBOX --container-name=life sh -c 'echo "\$SLURM_JOB_ID-\$(hostname)" >/state'
srun -K --container-name=life sh -c 'echo "second step saw \$(cat /state)"'
srun -K sh -c 'ls -d /var/tmp/slipway-$UID_/containers/job-\$SLURM_JOB_ID/life >/dev/null && echo "on \$(hostname) the container exists"'
EOS
    run_batch "$script"
    rm -f "$script"
    echo "$output" >&2
    assert_success
    jobid=$(sed -n 's/^second step saw \([0-9]*\)-node1$/\1/p' <<<"$output")
    [[ -n $jobid ]] || fail "no job id from node1's second step"
    for node in $NODES; do
        assert_output_contains "second step saw $jobid-$node"
        assert_output_contains "on $node the container exists"
        assert_no_file "$(node_cache "$node")/containers/job-$jobid"
    done
    assert_equal 0 "$(count_holders)" "slipway-holder processes on the nodes after the job"
}

test_writes_never_reach_the_cache() {
    local node before=() after=() i=0
    run_job srun -N4 -K --container-image="$BUSYBOX" true     # cached on every node
    assert_success
    for node in $NODES; do before+=("$(fingerprint "$(busybox_rootfs "$node")")"); done
    run_job srun -N4 -K --container-image="$BUSYBOX" --container-writable \
        sh -c 'echo changed >/etc/slipway-image && rm /bin/ls && chmod 700 /etc && touch /new && echo wrote'
    assert_success
    assert_equal 4 "$(grep -cx wrote <<<"$output")" "writable tasks"
    run_job salloc -N4 --time=2 srun -K --container-image="$BUSYBOX" --container-name=scribble \
        sh -c 'echo changed >/etc/slipway-image && rm /bin/cat && echo wrote'
    assert_success
    assert_equal 4 "$(grep -cx wrote <<<"$output")" "named-container tasks"
    for node in $NODES; do
        after+=("$(fingerprint "$(busybox_rootfs "$node")")")
        assert_equal "${before[i]}" "${after[i]}" "fingerprint of the cached rootfs on $node"
        assert_equal busybox "$(cat "$(busybox_rootfs "$node")/etc/slipway-image")" "cached /etc/slipway-image on $node"
        i=$((i + 1))
    done
}

test_one_holder_per_node_and_scancel_of_a_job_leaves_nothing() {
    local jobid node
    [[ -z $(node_container_mounts) ]] || fail "container mounts in a node's namespace before the test:"$'\n'"$(node_container_mounts)"
    run_job sbatch --parsable -N4 --ntasks-per-node=2 --time=2 -o /dev/null \
        --wrap "srun -K --container-image=$BUSYBOX --container-name=doomed sleep 300"
    assert_success
    jobid=${output%%;*}
    trap "\"\$SANDBOX\" exec -- scancel $jobid" EXIT
    wait_until 20 holders_are 4 "$jobid" || fail "holders running: $(count_holders "$jobid"), expected 4 (job $jobid: $(job_field "$jobid" JobState))"
    sleep 0.5   # the tasks join
    local holders
    holders=$(job_holders "$jobid" | tr '\n' ' ')
    for node in $NODES; do
        assert_equal 1 "$(job_holders "$jobid" "$node" | wc -l)" "holders on $node (2 tasks)"
        [[ -d $(node_cache "$node")/containers/job-$jobid/doomed ]] || fail "no runtime directory of job $jobid on $node"
    done
    run_job scancel "$jobid"
    assert_success
    wait_until 20 job_gone "$jobid" || fail "job $jobid still $(job_field "$jobid" JobState) 20 s after scancel"
    local pid
    for pid in $holders; do [[ ! -e /proc/$pid ]] || fail "holder $pid survived scancel"; done
    assert_equal 0 "$(count_holders)" "slipway-holder processes on the nodes after scancel"
    assert_equal "" "$(job_user_pids | tr '\n' ' ')" "processes of the job user on the nodes"
    assert_equal "" "$(node_container_mounts)" "container mounts in the nodes' namespaces"
    for node in $NODES; do
        assert_no_file "$(node_cache "$node")/containers/job-$jobid"
    done
}

test_scancel_of_a_step_stops_its_containers() {
    local jobid
    run_job sbatch --parsable -N2 --time=2 -o /dev/null \
        --wrap "srun -K -N2 --container-image=$BUSYBOX sleep 300; sleep 30"
    assert_success
    jobid=${output%%;*}
    trap "\"\$SANDBOX\" exec -- scancel $jobid" EXIT
    wait_until 20 holders_are 2 "$jobid" || fail "holders running: $(count_holders "$jobid"), expected 2"
    run_job scancel "$jobid.0"
    assert_success
    local holders
    holders=$(job_holders "$jobid")
    wait_until 10 holders_are 0 "" || fail "$(count_holders "$jobid") holders still running 10 s after scancel of step $jobid.0"
    local left
    # The tasks themselves (the batch script's srun, whose arguments also say "sleep 300", may
    # still be on its way out).
    left=$(for p in $(job_user_pids); do tr '\0' ' ' <"/proc/$p/cmdline"; echo; done |
        grep -E '^(/usr)?(/bin/)?sleep 300' || true)
    run_job scancel "$jobid"
    assert_equal "" "$left" "tasks of the cancelled step"
    for pid in $holders; do [[ ! -e /proc/$pid ]] || fail "holder $pid survived scancel of the step"; done
}

test_per_task_variables_are_each_tasks_own_in_a_shared_container() {
    run_job srun -N2 --ntasks-per-node=4 -K --mpi=pmix --container-image="$ENVIMG" sh -c \
        'echo "$(hostname) $(readlink /proc/self/ns/user) $SLURM_PROCID $SLURM_LOCALID $PMIX_RANK"'
    assert_success
    output=$(grep -v '^srun: job [0-9]* ' <<<"$output")
    mapfile -t lines <<<"$output"
    assert_line_count 8
    # Ranks 0-7 once each, PMIX_RANK = SLURM_PROCID, local ids 0-3 on each node, one user
    # namespace per node (the tasks share the container) and none shared between nodes.
    assert_equal "0 1 2 3 4 5 6 7 " "$(awk '{print $3}' <<<"$output" | sort -n | tr '\n' ' ')" "SLURM_PROCID"
    assert_equal 0 "$(awk '$3 != $5' <<<"$output" | wc -l)" "tasks whose PMIX_RANK differs from SLURM_PROCID"
    assert_equal "0 0 1 1 2 2 3 3 " "$(awk '{print $4}' <<<"$output" | sort -n | tr '\n' ' ')" "SLURM_LOCALID"
    assert_equal 2 "$(awk '{print $1, $2}' <<<"$output" | sort -u | wc -l)" "(node, user namespace) pairs"
    assert_equal 2 "$(awk '{print $2}' <<<"$output" | sort -u | wc -l)" "user namespaces"
}
