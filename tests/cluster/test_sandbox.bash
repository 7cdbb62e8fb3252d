# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Tests of contrib/sandbox/slipway-sandbox itself: up (idempotent, fast),
# the nodes it makes, exec, the registry and test images, and down (leaves
# nothing behind). Run: tests/cluster/run.bash tests/cluster/test_sandbox.bash
# The sandbox is left as it was found: up if it was up, down otherwise.

setup_file() {
    WAS_UP=0
    if sandbox_is_up; then WAS_UP=1; fi
    require_sandbox
}

teardown_file() {
    if ((WAS_UP)); then "$SANDBOX" up >/dev/null 2>&1; else "$SANDBOX" down >/dev/null 2>&1; fi
}

# The pids recorded for the sandbox's daemons, one per line.
daemon_pids() { cat "$SANDBOX_DIR"/run/*.pid 2>/dev/null | sort -u; }

# slurmd 24.11 (Debian 13) logs "slurmd version 24.11.5 started" and only 10 s later "slurmd
# started on ..." and serves (docs/platform.md): 15 s there.
test_up_from_down_brings_4_idle_nodes_within_10s() {
    "$SANDBOX" down >/dev/null 2>&1
    local t0 limit=10
    [[ ${SLIPWAY_RELEASE:-bookworm} == bookworm ]] || limit=15
    t0=$(now)
    run_host "$SANDBOX" up
    assert_success
    assert_less "$(elapsed "$t0")" "$limit" "seconds for up"
    run_root sinfo -h -N -o '%N %t'
    assert_output "$(printf 'node%s idle\n' 1 2 3 4)"
}

# Another release's controller state (Slurm 24.11 writes the cluster name as NAME|ID, which 22.05
# reads as another cluster's and refuses to start on): up starts from a clean state whatever the
# last release left.
test_up_after_another_release_s_controller_state() {
    "$SANDBOX" down >/dev/null 2>&1
    printf 'slipway-sandbox|2519\n' >"$SANDBOX_DIR/slurmctld/clustername"
    run_host "$SANDBOX" up
    assert_success
    run_root sinfo -h -N -o '%N %t'
    assert_output "$(printf 'node%s idle\n' 1 2 3 4)"
}

# The controller starts empty, so job IDs start again at 1: each node starts as after a reboot.
# A slurmd that read back the last instance's cred_state (or another release's) refused new jobs
# that reused an ID ("Task launch ... failed on node node2: Job credential revoked"), and a killed
# step's PMIx directory in the node's /tmp failed the next step of its ID ("File exists").
test_up_starts_the_nodes_as_empty_as_the_controller() {
    local node dir
    run_job srun -N4 -K true
    assert_success
    "$SANDBOX" down >/dev/null 2>&1
    for node in "$SANDBOX_DIR"/nodes/node{1..4}; do
        [[ -n $(ls -A "$node/spool") ]] || fail "$node/spool: empty after a job and down; this test checks nothing"
        echo "not this instance's" >"$node/spool/cred_state"
        install -d -o slwuser "$node/tmp/spmix_appdir_$(id -u slwuser)_1.0" "$node/var-tmp/kept-$$"
    done
    run_host "$SANDBOX" up
    assert_success
    for node in "$SANDBOX_DIR"/nodes/node{1..4}; do
        if grep -qs "not this instance's" "$node/spool/cred_state"; then
            fail "$node/spool/cred_state: the last instance's, read by the new slurmd"
        fi
        [[ ! -e $node/tmp/spmix_appdir_$(id -u slwuser)_1.0 ]] || fail "$node/tmp: the last instance's step directory is still there"
        [[ -d $node/var-tmp/kept-$$ ]] || fail "$node/var-tmp: emptied; it outlives a reboot"
        rmdir "$node/var-tmp/kept-$$"
    done
    run_job srun --mpi=pmix -N4 -K true
    assert_success
}

test_up_twice_is_idempotent_and_restarts_nothing() {
    local before t0
    before=$(daemon_pids)
    t0=$(now)
    run_host "$SANDBOX" up
    assert_success
    assert_less "$(elapsed "$t0")" 2 "seconds for a second up"
    assert_equal "$before" "$(daemon_pids)" "daemon pids"
}

test_srun_spans_4_nodes_with_own_hostnames_and_addresses() {
    run_job srun -N4 --ntasks-per-node=2 -K sh -c 'echo $(hostname) $(hostname -i)'
    assert_success
    output=$(sort <<<"$output")
    assert_output "$(for i in 1 1 2 2 3 3 4 4; do echo "node$i $SANDBOX_NET.1$i"; done)"
}

test_8_tasks_fit_on_one_node() {
    run_job srun -N1 -n8 -K hostname
    assert_success
    assert_line_count 8
}

test_nodes_have_private_tmp_and_var_tmp() {
    run_job srun -N4 --ntasks-per-node=1 -K sh -c \
        'touch /tmp/slipway-test-$SLURM_NODEID /var/tmp/slipway-test-$SLURM_NODEID;
         ls /tmp /var/tmp | grep -c slipway-test-; rm -f /tmp/slipway-test-* /var/tmp/slipway-test-*'
    assert_success
    assert_output "$(printf '2\n2\n2\n2')"
}

test_pmix_is_the_default_mpi() {
    run_job srun -N2 -n4 -K sh -c 'echo "$SLURM_MPI_TYPE $PMIX_RANK"'
    assert_success
    assert_equal "pmix 0 pmix 1 pmix 2 pmix 3" "$(sort <<<"$output" | tr '\n' ' ' | sed 's/ $//')" "mpi type and ranks"
}

test_openmpi_allreduce_across_nodes() {
    command -v mpicc >/dev/null || skip "mpicc not installed (libopenmpi-dev)"
    local dir
    dir=$(job_user_home)/test-sandbox-mpi
    mkdir -p "$dir"
    cat >"$dir/allreduce.c" <<'SRC'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, sum;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("size %d sum %d\n", size, sum);
    MPI_Finalize();
    return 0;
}
SRC
    mpicc -o "$dir/allreduce" "$dir/allreduce.c" || fail "mpicc failed"
    chmod -R a+rX "$dir"
    run_job srun -N4 -n8 -K "$dir/allreduce"
    rm -rf "$dir"
    assert_success
    assert_output "size 8 sum 28"
}

test_sbatch_and_salloc_run_steps() {
    local script
    script=$(job_user_home)/test-sandbox-batch.sh
    printf '#!/bin/sh\nsrun -K -N2 hostname | sort\n' >"$script"
    chmod 0644 "$script"
    run_batch "$script" -N2
    rm -f "$script"
    assert_success
    # Two nodes, whichever two were free (a node still completing the last test's job is not).
    assert_line_count 2
    [[ ${lines[0]} =~ ^node[1-4]$ && ${lines[1]} =~ ^node[1-4]$ && ${lines[0]} != "${lines[1]}" ]] ||
        fail "expected two different nodes, got: $output"
    run_job salloc -Q -N2 srun -K hostname
    assert_success
    assert_line_count 2
}

test_exec_passes_stdin_exit_status_and_user() {
    _run "$SANDBOX" exec -- sh -c 'read -r line; echo "$(id -un) $line"; exit 7' <<<"hello"
    assert_failure 7
    assert_output "slwuser hello"
    run_root id -u
    assert_output 0
}

# As after `module load slipway` on a site: the build's `slipway` on PATH, on the nodes too, and
# the sandbox's plain-HTTP registry among the insecure ones, so the README's examples run as typed.
test_exec_has_the_builds_slipway_and_the_sites_settings() {
    local build
    build=$(dirname "$(dirname "${SLIPWAY_PLUGIN:-$REPO_DIR/build/spank/spank_slipway.so}")")
    [[ -x $build/launcher/slipway ]] || skip "the slipway command is not built next to the plugin"
    require_images busybox
    run_job sh -c 'command -v slipway; slipway --version'
    assert_success
    assert_equal "$SANDBOX_DIR/bin/slipway" "${lines[0]}" "the slipway on PATH"
    run_job slipway run --container-image="$(image_ref busybox)" -- cat /etc/slipway-image
    assert_success
    assert_output "busybox"
    run_job srun -N2 -K slipway run --container-image="$(image_ref busybox)" -- cat /etc/slipway-image
    assert_success
    assert_equal 2 "$(grep -cx busybox <<<"$output")" "tasks that ran the image"
}

test_daemons_listen_only_on_the_sandbox_network() {
    run_host ss -Hltn
    assert_success
    assert_output_contains "$SANDBOX_NET.1:5000 "
    assert_output_contains "$SANDBOX_NET.1:6817 "
    run_host ss -Hltnp
    if grep -E 'slurmctld|docker-registry|munged' <<<"$output" | grep -vE '10\.77\.[0-9]\.1:|127\.0\.0\.1:'; then
        fail "a sandbox daemon listens outside $SANDBOX_NET.1 / loopback"
    fi
}

test_images_build_cached_and_push() {
    local t0
    run_host "$SANDBOX" images busybox layers
    assert_success
    t0=$(now)
    run_host "$SANDBOX" images busybox layers
    assert_success
    assert_less "$(elapsed "$t0")" 5 "seconds for cached images"
    run_host skopeo inspect --tls-verify=false "docker://$(image_ref busybox)"
    assert_success
    assert_output_contains '"Architecture": "amd64"'
    assert_equal $SANDBOX_NET.1:5000/slipway/busybox:latest "$(image_ref busybox)" "image reference"
}

test_registry_logs_method_and_path() {
    require_images busybox
    run_host skopeo inspect --raw --tls-verify=false "docker://$(image_ref busybox)"
    assert_success
    grep -q '"GET /v2/slipway/busybox/manifests/latest HTTP' "$SANDBOX_DIR/log/registry-access.log" \
        || fail "no manifest request in $SANDBOX_DIR/log/registry-access.log"
}

test_layers_expected_matches_umoci_unpack() {
    local layout work
    layout=$("$REPO_DIR/contrib/images/build-image" layers | cut -d' ' -f2)
    work=$(mktemp -d)
    run_host umoci unpack --rootless --image "$layout:latest" "$work/bundle"
    assert_success
    run_host "$REPO_DIR/contrib/images/tree-manifest" "$work/bundle/rootfs"
    rm -rf "$work"
    assert_success
    assert_output "$(cat "$REPO_DIR/contrib/images/layers.expected")"
}

# Whether a sandbox other than ours is running (their daemons share names with ours).
other_sandboxes_up() {
    local f
    for f in /var/lib/slipway-sandbox*/run/slurmctld.pid; do
        [[ $f == "$SANDBOX_DIR/run/slurmctld.pid" ]] && continue
        [[ -e $f && -e /proc/$(cat "$f") ]] && return 0
    done
    return 1
}

test_down_leaves_nothing_behind() {
    local pids pid name stray
    pids=$(daemon_pids)
    [[ -n $pids ]] || fail "no daemon pids recorded before down"
    # A task that detaches itself outlives its step (proctrack/linuxproc), and a process that an
    # `exec` detached (as rootless Podman's pause process is) outlives it: down stops both,
    # the second only with no other instance up (they share the job user).
    run_job srun -N1 -w node2 -K sh -c 'setsid sleep 3127 </dev/null >/dev/null 2>&1 & echo detached'
    assert_output "detached"
    run_job sh -c 'setsid sleep 3128 </dev/null >/dev/null 2>&1 & echo detached'
    assert_output "detached"
    local i seconds
    for seconds in 3127 3128; do
        for ((i = 0; i < 30; i++)); do pgrep -u slwuser -x -f "sleep $seconds" >/dev/null && break; sleep 0.1; done
        stray+=" $(pgrep -u slwuser -x -f "sleep $seconds")" || fail "the detached 'sleep $seconds' does not run"
    done
    other_sandboxes_up && stray=${stray% *}
    run_host "$SANDBOX" down
    assert_success
    for pid in $pids $stray; do [[ ! -e /proc/$pid ]] || fail "pid $pid still runs after down"; done
    # "[/]..." matches the daemons' command lines but not this pgrep's (nor its timeout's). A
    # process may still be exiting (CI once matched one whose command line was gone when pgrep
    # printed it): give it 3 s.
    for ((i = 0; i < 30; i++)); do
        pgrep -f -- "[/]${SANDBOX_DIR#/}/" >/dev/null || break
        sleep 0.1
    done
    run_host pgrep -a -f -- "[/]${SANDBOX_DIR#/}/"
    assert_failure 1
    # With no other sandbox instance up, no daemon of these names may run at all.
    # (pgrep matches names of at most 15 characters: one name per call.)
    if ! other_sandboxes_up; then
        for name in slurmctld slurmd slurmstepd munged docker-registry slipway-holder; do
            run_host pgrep -a -x "$name"
            assert_failure 1
        done
    fi
    [[ -z $(findmnt -rn | grep -F "$SANDBOX_DIR") ]] || fail "mounts left: $(findmnt -rn | grep -F "$SANDBOX_DIR")"
    local i=${SLIPWAY_SANDBOX_INSTANCE:-0} sfx=
    ((i == 0)) || sfx=$i
    [[ -z $(ip netns list | grep "^slw$sfx-node") ]] || fail "network namespaces left: $(ip netns list)"
    ! ip link show "slwbr$i" >/dev/null 2>&1 || fail "bridge slwbr$i left"
    assert_no_file "$SANDBOX_DIR/etc/plugstack.conf"
    assert_no_file "$SANDBOX_DIR/bin/slipway"
    run_host "$SANDBOX" down
    assert_success
}
