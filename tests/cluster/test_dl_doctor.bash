# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# `slipway doctor` (issue 5) on a sandbox node, as the job user: the sandbox's known state (user
# namespaces and overlayfs work, the registry answers, mpi/pmix and libpmix.so are installed, no
# GPUs, the configured host libraries load, Slurm is a tested release), the warning on an untested
# Slurm, and the diagnosis when user namespaces are off.
source "$(dirname "${BASH_SOURCE[0]}")/dl_common.bash"

setup_file() {
    dl_require_sandbox
    SLIPWAY_BIN=${SLIPWAY_BIN:-$(dirname "$SLIPWAY_PLUGIN_PATH")/../launcher/slipway}
    [[ -x $SLIPWAY_BIN ]] || SLIPWAY_BIN=$REPO_DIR/build/launcher/slipway
    [[ -x $SLIPWAY_BIN ]] || fail "no slipway binary; set SLIPWAY_BIN"
    # The nodes cannot see a build under /tmp (each has its own): run a copy from the user's home.
    install -m 0755 -o slwuser "$SLIPWAY_BIN" "$(job_user_home)/slipway-doctor-test"
    SLIPWAY_BIN=$(job_user_home)/slipway-doctor-test
}

teardown_file() { rm -f "$(job_user_home)/slipway-doctor-test"; }

SLIPWAY_PLUGIN_PATH=${SLIPWAY_PLUGIN:-$REPO_DIR/build/spank/spank_slipway.so}

test_doctor_on_a_node_reports_the_sandbox_state() {
    run_job srun -N1 -n1 -w node2 -K "$SLIPWAY_BIN" doctor --registry="$SANDBOX_NET.1:5000" \
        --host-libs='mpi:libmpi.so.40;nccl:libnccl.so.2'
    # The sandbox's Slurm (22.05 on Debian 12, 24.11 on Debian 13: sinfo prints "slurm-wlm
    # 22.05.8") is a tested release.
    grep -qE '^ok    slurm: slurm[-a-z]* [0-9]+\.[0-9]+\.[0-9]+: release [0-9]+\.[0-9]+ is tested \(Slurm ' \
        <<<"$output" || fail "doctor did not find a tested Slurm: $output"
    assert_success
    assert_output_contains "ok    userns: unprivileged user namespaces work"
    assert_output_contains "ok    overlay: overlayfs mounts inside a user namespace"
    # The node cache's line: ok, or warn when this machine's disk has under 10 GiB left (the
    # suite's own node caches fill it; doctor is right to say so, and the test checks the wording).
    local cache="cache: cache /var/tmp/slipway-$(id -u slwuser): "
    grep -qxE "ok    ${cache}[0-9.]+ GiB free on .*|warn  ${cache}[0-9]\.[0-9] GiB free on .* \(large images need more\)" \
        <<<"$output" || fail "no ok (or low-disk warn) line for the node cache: $output"
    assert_output_contains "ok    registry: $SANDBOX_NET.1:5000 reachable"
    assert_output_contains "ok    pmix: mpi/pmix plugin present, libpmix.so -> "
    assert_output_contains "skip  gpus: no NVIDIA GPUs (no /dev/nvidiaN)"
    # OpenMPI 4.1 (Debian 12) brings 8 libraries, OpenMPI 5.0 (Debian 13, UCX and libfabric) 21.
    assert_output_matches "ok    hostlibs:mpi: [0-9]+ libraries present and loadable"
    assert_output_contains "ok    hostlibs:nccl: 1 libraries present and loadable"
}

# A Slurm release the suite does not run on (a fake sinfo first on PATH stands for the node's).
test_doctor_warns_on_an_untested_slurm() {
    local bin
    bin=$(mktemp -d /tmp/slipway-doctor-sinfo.XXXXXX)
    printf '#!/bin/sh\necho "slurm 23.02.7"\n' >"$bin/sinfo"
    chmod 0755 "$bin/sinfo"
    run_host env PATH="$bin:$PATH" "$SLIPWAY_BIN" doctor
    rm -rf "$bin"
    assert_output_contains "warn  slurm: slurm 23.02.7 is not a release Slipway is tested on (tested: 22.05, 24.11); fix: build the plugin against this Slurm"
}

test_doctor_names_a_dead_registry() {
    run_job srun -N1 -n1 -K "$SLIPWAY_BIN" doctor --registry="$SANDBOX_NET.1:5999"
    assert_failure 1
    assert_output_contains "FAIL  registry: cannot connect to $SANDBOX_NET.1:5999: Connection refused; fix: "
}

# user.max_user_namespaces cannot be written here, even by root (this machine is a container), and
# a real sysctl would break every other test running beside this one. The limit is per user
# namespace (user_namespaces(7)), so a child namespace sets its own to 0 and runs doctor inside:
# doctor sees the same refusal (ENOSPC) and the same sysctl value as on a node with it at 0; the
# host's value is untouched, so nothing needs restoring.
test_doctor_names_user_namespaces_off() {
    run_host unshare -U -r sh -c "echo 0 > /proc/sys/user/max_user_namespaces && $SLIPWAY_BIN doctor"
    assert_failure 1
    assert_output_contains "FAIL  userns: unprivileged user namespaces are off: user.max_user_namespaces=0; fix: sysctl -w user.max_user_namespaces=15000"
    assert_output_contains "skip  overlay: not tried: user namespaces do not work"
    [[ $(cat /proc/sys/user/max_user_namespaces) != 0 ]] || fail "the host's limit changed"
}
