# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-unshare=net,ipc,uts on the sandbox: the node's container gets its own network (only
# a loopback, up), IPC or UTS (host name kept) namespace, shared by the tasks of the node; without
# the option the container keeps the node's. srun, #SBATCH, salloc.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
}

# "nodeN net:[...] ipc:[...] uts:[...]" of each node's slurmd: what a task outside a container has.
node_namespaces() {
    local f pid
    for f in "$SANDBOX_DIR"/run/slurmd-node*.pid; do
        pid=$(cat "$f")
        echo "$(basename "$f" .pid | sed 's/^slurmd-//') $(readlink /proc/$pid/ns/net) $(readlink /proc/$pid/ns/ipc) $(readlink /proc/$pid/ns/uts)"
    done
}

readonly PROBE='echo "$(hostname) $(readlink /proc/self/ns/net) $(readlink /proc/self/ns/ipc) $(readlink /proc/self/ns/uts) ifs=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | sort | tr "\n" ,) lo=$(ip -o link show lo | grep -o "[<,]UP[,>]")"'

# run_probe OPTION...: 2 nodes x 2 tasks; sets NODES (node name -> its namespaces) and checks that
# the two tasks of a node agree.
run_probe() {
    run_job srun -N2 --ntasks-per-node=2 -K --container-image="$BUSYBOX" "$@" sh -c "$PROBE"
    assert_success
    assert_line_count 4
    assert_equal 2 "$(printf '%s\n' "${lines[@]}" | sort -u | wc -l)" "distinct task views (one per node)"
}

# ns_of NODE KIND(net|ipc|uts) from node_namespaces
host_ns() { node_namespaces | awk -v n="$1" -v k="$2" '$1 == n { print (k == "net" ? $2 : k == "ipc" ? $3 : $4) }'; }
task_ns() { printf '%s\n' "${lines[@]}" | awk -v n="$1" -v k="$2" '$1 == n { print (k == "net" ? $2 : k == "ipc" ? $3 : $4); exit }'; }

# assert_ns KIND same|own: for every node in the output, the tasks' namespace KIND is the node's or not.
assert_ns() {
    local node
    for node in $(printf '%s\n' "${lines[@]}" | awk '{print $1}' | sort -u); do
        if [[ $2 == same ]]; then
            assert_equal "$(host_ns "$node" "$1")" "$(task_ns "$node" "$1")" "$1 namespace on $node"
        elif [[ $(host_ns "$node" "$1") == "$(task_ns "$node" "$1")" ]]; then
            fail "the container on $node shares the node's $1 namespace"
        fi
    done
}

test_default_shares_the_nodes_namespaces() {
    run_probe
    assert_ns net same
    assert_ns ipc same
    assert_ns uts same
    assert_output_contains "eth0"
}

test_unshare_net_leaves_only_loopback_up() {
    run_probe --container-unshare=net
    assert_ns net own
    assert_ns ipc same
    assert_ns uts same
    local line
    for line in "${lines[@]}"; do
        [[ $line == *" ifs=lo, lo=<"* || $line == *" ifs=lo, lo=,"* ]] || fail "not only an up loopback: $line"
    done
}

test_unshare_ipc() {
    run_probe --container-unshare=ipc
    assert_ns ipc own
    assert_ns net same
}

test_unshare_uts_keeps_the_host_name() {
    run_probe --container-unshare=uts
    assert_ns uts own
    assert_ns net same
    assert_output_matches '^node[0-9]+ '
    [[ ${lines[*]} != *"(none)"* ]] || fail "host name lost: $output"
}

test_unshare_all_three() {
    run_probe --container-unshare=net,ipc,uts
    assert_ns net own
    assert_ns ipc own
    assert_ns uts own
}

test_sbatch_unshare() {
    local script
    script=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-unshare-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-unshare=net
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'echo "step \$SLURM_PROCID \$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" ,)"'
EOS
    run_batch "$script"
    rm -f "$script"
    echo "$output" >&2
    assert_success
    assert_equal 2 "$(grep -c '^step [01] lo,$' <<<"$output")" "steps with only a loopback"
}

test_salloc_unshare() {
    run_job salloc -N2 --time=2 --container-image="$BUSYBOX" --container-unshare=net \
        srun -K -n2 sh -c 'tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" ,; echo'
    assert_success
    assert_equal 2 "$(grep -cx 'lo,' <<<"$output")" "steps with only a loopback"
}

# As pyxis: a step that joins a running container cannot have a namespace of its own, so one that
# asks to unshare a namespace the container shares with the node is refused ("not in a separate
# network namespace", pyxis's words); the container's own namespaces are the step's.
test_joining_step_refuses_a_namespace_the_container_lacks() {
    run_job salloc -N1 --time=2 sh -c "
        srun -K --container-image=$BUSYBOX --container-name=nons sleep 8 &
        sleep 2
        for ns in net ipc uts; do
            srun --overlap -K --container-name=nons --container-unshare=\$ns true; echo \$ns=\$?
        done
        srun --overlap -K --container-name=nons true; echo plain=\$?
        wait"
    assert_output_matches "slipway: --container-unshare=net: container 'nons' running on node[0-9]+ is not in a separate network namespace"
    assert_output_contains "is not in a separate IPC namespace"
    assert_output_contains "is not in a separate UTS namespace"
    assert_output_not_contains "net=0"
    assert_output_not_contains "ipc=0"
    assert_output_not_contains "uts=0"
    assert_output_contains "plain=0"
}

test_joining_step_may_name_the_containers_namespace() {
    run_job salloc -N1 --time=2 sh -c "
        srun -K --container-image=$BUSYBOX --container-name=ownnet --container-unshare=net sh -c 'readlink /proc/self/ns/net; sleep 5' &
        sleep 2
        srun --overlap -K --container-name=ownnet --container-unshare=net readlink /proc/self/ns/net
        wait"
    assert_success
    assert_equal 2 "$(grep -c '^net:' <<<"$output")" "steps that ran"
    assert_equal 1 "$(grep '^net:' <<<"$output" | sort -u | wc -l)" "network namespaces"
}

test_sbatch_joining_step_refuses_a_namespace_the_container_lacks() {
    local script
    script=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-unshare-join-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-name=batchns
#SBATCH -N1 --time=2
srun -K sleep 6 &
sleep 2
srun --overlap -K --container-unshare=uts true; echo "uts=\$?"
wait
EOS
    run_batch "$script"
    rm -f "$script"
    echo "$output" >&2
    assert_output_contains "is not in a separate UTS namespace"
    assert_output_not_contains "uts=0"
}
