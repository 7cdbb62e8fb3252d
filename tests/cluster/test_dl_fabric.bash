# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Fabric devices (issue 27): the node's RDMA and fabric devices in every container, by default and
# as fabric_devices= (plugstack.conf) or SLIPWAY_FABRIC_DEVICES (`slipway run`) says, through srun,
# #SBATCH, salloc and `slipway run`, on nodes given stand-in devices and sysfs entries
# (standin_nodes.bash): which devices appear and how they are mounted, that umad/issm need the
# key, that a device the user cannot open on the node stays closed inside (as remapped root too),
# the /sys/class/infiniband* entries, RLIMIT_MEMLOCK inside equal to outside, doctor's report,
# and one-line errors for bad patterns.
source "$(dirname "${BASH_SOURCE[0]}")/standin_nodes.bash"

# uverbs/rdma_cm are 0666 on real nodes (rdma-core's udev rules), umad 0660 and issm 0600, root's.
readonly FABRIC_DEVICES="0666 /dev/infiniband/uverbs0
0666 /dev/infiniband/uverbs1
0666 /dev/infiniband/rdma_cm
0660 /dev/infiniband/umad0
0600 /dev/infiniband/issm0
0666 /dev/cxi0
0666 /dev/hfi1_0"
readonly FABRIC_SYSFS="/sys/class/infiniband/mlx5_0/node_type=1: CA
/sys/class/infiniband/mlx5_1/node_type=1: CA
/sys/class/infiniband_verbs/abi_version=6
/sys/class/infiniband_verbs/uverbs0/ibdev=mlx5_0
/sys/class/infiniband_verbs/uverbs1/ibdev=mlx5_1
/sys/class/infiniband_mad/abi_version=5
/sys/class/infiniband_mad/umad0/ibdev=mlx5_0"
readonly DEFAULT_SET="/dev/cxi0 /dev/hfi1_0 /dev/infiniband/rdma_cm /dev/infiniband/uverbs0 /dev/infiniband/uverbs1"
readonly MEMLOCK_KIB=4321  # below the sandbox's hard limit, unlike any default

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    HOME_DIR=$(job_user_home)
    # Home is shared by every sandbox instance: names of our own.
    PROBE=$HOME_DIR/fabric-probe-${SLIPWAY_SANDBOX_INSTANCE:-0}.sh
    OUTSIDE=$HOME_DIR/fabric-outside-${SLIPWAY_SANDBOX_INSTANCE:-0}.sh
    SLIPWAY_BIN=$HOME_DIR/slipway-fabric-${SLIPWAY_SANDBOX_INSTANCE:-0}
    local bin=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}/launcher/slipway
    [[ -x $bin ]] || fail "slipway is not built ($bin)"
    install -m 0755 -o slwuser "$bin" "$SLIPWAY_BIN"
    write_probe >"$PROBE"
    echo "awk '/^Max locked memory/ {print \"outside:\", \$4}' /proc/self/limits" >"$OUTSIDE"
    chown slwuser "$PROBE" "$OUTSIDE"
    restore_sandbox
}

teardown_file() {
    standin_down
    rm -f "$PROBE" "$OUTSIDE" "$SLIPWAY_BIN"
}

# A test that changed fabric_devices= puts the default back (a restart: new node namespaces).
teardown() { grep -q ' fabric_devices=' "$SANDBOX_DIR/etc/plugstack.conf" && restore_sandbox; true; }

restore_sandbox() {
    "$SANDBOX" up >/dev/null 2>&1 || fail "slipway-sandbox up failed"
    standin_up "$FABRIC_DEVICES" "$FABRIC_SYSFS"
}

# plugstack.conf with fabric_devices=$1; the nodes' stand-ins unless $2 is "refused" (slurmd
# then refuses to start: nothing runs on the nodes).
with_key() {
    SLIPWAY_PLUGIN_ARGS="fabric_devices=$1" "$SANDBOX" up >/dev/null 2>&1 || true
    grep -qF " fabric_devices=$1" "$SANDBOX_DIR/etc/plugstack.conf" || fail "plugstack.conf was not rewritten"
    [[ ${2:-} == refused ]] || standin_up "$FABRIC_DEVICES" "$FABRIC_SYSFS"
}

# What a task sees of the fabric, a line each: its node, the fabric devices, RLIMIT_MEMLOCK (soft,
# bytes), each device's mount flags, whether uverbs0/umad0/issm0 open for reading and writing,
# and the verbs sysfs entries.
write_probe() {
    cat <<'PROBE'
#!/bin/sh
echo "node: $(hostname)"
echo "devices:" $(ls -d /dev/infiniband/* /dev/cxi* /dev/hfi1_* 2>/dev/null)
echo "memlock: $(awk '/^Max locked memory/ {print $4}' /proc/self/limits)"
awk '$5 ~ /^\/dev\/(infiniband\/|cxi|hfi1_)/ {print "mount:", $5, $6}' /proc/self/mountinfo
for d in /dev/infiniband/uverbs0 /dev/infiniband/umad0 /dev/infiniband/issm0; do
    [ -e $d ] || continue
    if (: >$d && cat $d) 2>/dev/null; then echo "open: $d"; else echo "closed: $d"; fi
done
echo "sysfs:" $(cat /sys/class/infiniband_verbs/uverbs0/ibdev /sys/class/infiniband_mad/umad0/ibdev 2>&1) $(ls /sys/class/infiniband 2>&1)
PROBE
}

# The fabric lines of $output for every task: the same set on each.
assert_devices() {
    local want="devices:${1:+ $1}" got
    got=$(grep '^devices:' <<<"$output" | sort -u)
    [[ -n $got ]] || fail "no devices line:"$'\n'"$output"
    assert_equal "$want" "$got" "devices"
}

# Every fabric device mount is read-write and nosuid, with devices usable (no nodev).
assert_mount_flags() {
    local line n=0
    while read -r line; do
        [[ $line == mount:* ]] || continue
        n=$((n + 1))
        [[ $line =~ \ rw,nosuid(,|$) && $line != *nodev* ]] || fail "bad mount flags: $line"
    done <<<"$output"
    ((n > 0)) || fail "no fabric mounts:"$'\n'"$output"
}

assert_memlock_kept() {
    local want=$((MEMLOCK_KIB * 1024))
    assert_output_contains "outside: $want"
    grep -q "^memlock: $want$" <<<"$output" || fail "memlock inside is not $want:"$'\n'"$output"
    ! grep '^memlock:' <<<"$output" | grep -qv "^memlock: $want$" || fail "a task's memlock differs:"$'\n'"$output"
}

test_srun_tasks_get_the_default_fabric_devices() {
    run_job bash -c "ulimit -S -l $MEMLOCK_KIB && srun -N1 -K sh $OUTSIDE &&
        srun -N2 --ntasks-per-node=2 -K --container-image=$BUSYBOX sh $PROBE"
    assert_success
    assert_equal 4 "$(grep -c '^devices:' <<<"$output")" "tasks"
    assert_equal 2 "$(grep '^node:' <<<"$output" | sort -u | wc -l)" "nodes"
    assert_devices "$DEFAULT_SET"
    assert_mount_flags
    assert_output_contains "open: /dev/infiniband/uverbs0"
    assert_output_not_contains "umad0"
    assert_output_not_contains "issm0"
    # What libibverbs reads: the node's /sys, read-only, as it is.
    assert_equal "sysfs: mlx5_0 mlx5_0 mlx5_0 mlx5_1" "$(grep '^sysfs:' <<<"$output" | sort -u)" "sysfs"
    assert_memlock_kept
}

test_batch_steps_get_the_fabric_devices() {
    local script=$HOME_DIR/fabric-batch-$$.sh
    printf '#!/bin/sh\n#SBATCH --container-image=%s\n#SBATCH -N2 --time=2\nulimit -S -l %s\nsh %s\nsrun -K --ntasks-per-node=1 sh %s\n' \
        "$BUSYBOX" "$MEMLOCK_KIB" "$OUTSIDE" "$PROBE" >"$script"
    run_batch "$script"
    rm -f "$script"
    assert_success
    assert_equal 2 "$(grep -c '^devices:' <<<"$output")" "tasks"
    assert_devices "$DEFAULT_SET"
    assert_mount_flags
    assert_memlock_kept
}

test_salloc_steps_get_the_fabric_devices() {
    run_job bash -c "ulimit -S -l $MEMLOCK_KIB && salloc -N1 --time=2 --container-image=$BUSYBOX \
        sh -c 'sh $OUTSIDE; srun -K sh $PROBE'"
    assert_success
    assert_devices "$DEFAULT_SET"
    assert_mount_flags
    assert_memlock_kept
}

# umad/issm only with the key; the key adds (mad) and leaves out (-PATTERN) at once. umad0 (0660)
# and issm0 (0600) are root's: the job user cannot open them on the node, so neither inside, even
# as root in the container (its capabilities do not cover files of ids it does not map).
test_the_key_adds_mad_devices_and_leaves_out_others() {
    with_key "default,mad,-/dev/infiniband/uverbs1,-/dev/cxi*"
    run_job bash -c "ulimit -S -l $MEMLOCK_KIB && srun -N1 -K sh $OUTSIDE &&
        srun -N2 -K --container-image=$BUSYBOX sh $PROBE"
    assert_success
    assert_devices "/dev/hfi1_0 /dev/infiniband/issm0 /dev/infiniband/rdma_cm /dev/infiniband/umad0 /dev/infiniband/uverbs0"
    assert_mount_flags
    assert_output_contains "open: /dev/infiniband/uverbs0"
    assert_output_contains "closed: /dev/infiniband/umad0"
    assert_output_contains "closed: /dev/infiniband/issm0"
    assert_memlock_kept
    run_job srun -N1 -K --container-image="$BUSYBOX" --container-remap-root sh -c \
        "id -u; sh /root/$(basename "$PROBE")"
    assert_success
    assert_equal 0 "${lines[0]}" "uid inside"
    assert_output_contains "open: /dev/infiniband/uverbs0"
    assert_output_contains "closed: /dev/infiniband/umad0"
    assert_output_contains "closed: /dev/infiniband/issm0"
    # The same on the node itself.
    run_job srun -N1 -K sh -c 'cat /dev/infiniband/issm0 || echo "closed on the node"'
    assert_output_contains "closed on the node"
}

test_a_bad_pattern_is_refused_in_one_line() {
    with_key "default,/dev/*/uverbs0" refused
    run_job srun -N1 -K --container-image="$BUSYBOX" true
    assert_failure
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines"
    assert_output_contains "slipway: plugstack.conf: fabric_devices: pattern '/dev/*/uverbs0' has a glob character in a directory; write /dev/NAME or /dev/DIR/NAME"
}

test_slipway_run_gets_the_fabric_devices() {
    run_job bash -c "ulimit -S -l $MEMLOCK_KIB && srun -N1 -K sh $OUTSIDE &&
        srun -N2 --ntasks-per-node=2 -K $SLIPWAY_BIN run --container-image=$BUSYBOX -- sh $PROBE"
    assert_success
    assert_equal 4 "$(grep -c '^devices:' <<<"$output")" "tasks"
    assert_devices "$DEFAULT_SET"
    assert_mount_flags
    assert_equal "sysfs: mlx5_0 mlx5_0 mlx5_0 mlx5_1" "$(grep '^sysfs:' <<<"$output" | sort -u)" "sysfs"
    assert_memlock_kept
    # Standalone (no step of srun's: the process itself becomes the container) on a node.
    run_job srun -N1 -K env -u SLURM_STEP_ID -u SLURM_JOB_ID "$SLIPWAY_BIN" run --container-image="$BUSYBOX" -- sh "$PROBE"
    assert_success
    assert_devices "$DEFAULT_SET"
    assert_mount_flags
    run_job srun -N1 -K env SLIPWAY_FABRIC_DEVICES='/dev/infiniband/*,-/dev/infiniband/issm*' \
        "$SLIPWAY_BIN" run --container-image="$BUSYBOX" -- sh "$PROBE"
    assert_success
    assert_devices "/dev/infiniband/rdma_cm /dev/infiniband/umad0 /dev/infiniband/uverbs0 /dev/infiniband/uverbs1"
    assert_output_contains "closed: /dev/infiniband/umad0"
    run_job srun -N1 -K env SLIPWAY_FABRIC_DEVICES=none "$SLIPWAY_BIN" run --container-image="$BUSYBOX" -- sh "$PROBE"
    assert_success
    assert_devices ""
    run_job srun -N1 -K env SLIPWAY_FABRIC_DEVICES=default,uverbs "$SLIPWAY_BIN" run --container-image="$BUSYBOX" -- true
    assert_failure
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway: lines"
    assert_output_matches "srun: error: node[0-9]: task 0: Exited with exit code 2"
    assert_output_contains "slipway: SLIPWAY_FABRIC_DEVICES: 'uverbs' is neither default, mad, none nor a device pattern"
}

test_doctor_reports_the_fabric_devices() {
    run_job bash -c "ulimit -S -l $MEMLOCK_KIB && srun -N1 -K $SLIPWAY_BIN doctor"
    assert_output_contains "warn  fabric: 5 fabric device(s) bound into containers: /dev/cxi0, /dev/hfi1_0, /dev/infiniband/rdma_cm, /dev/infiniband/uverbs0 (mlx5_0), /dev/infiniband/uverbs1 (mlx5_1); left out by fabric_devices: /dev/infiniband/issm0, /dev/infiniband/umad0; /sys/class/infiniband: mlx5_0, mlx5_1; RLIMIT_MEMLOCK is 4.2 MiB, which limits the memory RDMA may register; fix: "
    run_job srun -N1 -K "$SLIPWAY_BIN" doctor --fabric-devices=default,mad
    assert_output_contains "fabric: 7 fabric device(s) bound into containers: "
    assert_output_contains "/dev/infiniband/umad0 (mlx5_0)"
    assert_output_not_contains "left out by fabric_devices"
    run_job srun -N1 -K "$SLIPWAY_BIN" doctor --fabric-devices=/dev/cxi[
    assert_failure 2
    assert_output_contains "slipway: --fabric-devices: pattern '/dev/cxi[' has a '[' without its ']'"
}
