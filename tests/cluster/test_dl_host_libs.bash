# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Host library injection (issue 5): the host's OpenMPI runs an MPI program inside debian-python
# (shown from /proc/self/maps), an image whose libmpi has MPICH's soname refuses it with one line
# naming both, and a program linked against libnccl in an image loads the host's NCCL (from
# /usr/local/cuda; no GPU is needed to load it).
source "$(dirname "${BASH_SOURCE[0]}")/dl_common.bash"

setup_file() {
    dl_require_sandbox
    require_images debian-python mpich-abi nccl-app
    DEBIAN_PYTHON=$(image_ref debian-python)
    MPICH_ABI=$(image_ref mpich-abi)
    NCCL_APP=$(image_ref nccl-app)
    PROBE=$(job_user_home)/dl-mpi-probe
    mpicc -O2 -o "$PROBE" "$(dirname "${BASH_SOURCE[0]}")/dl_mpi_probe.c"
    chown slwuser: "$PROBE"
    HOST_LIBMPI=$(basename "$(readlink -f /lib/x86_64-linux-gnu/libmpi.so.40)")
}

teardown_file() { rm -f "$PROBE"; }

test_openmpi_program_runs_with_the_hosts_libmpi() {
    run_job srun --mpi=pmix -N2 --ntasks-per-node=2 -K --container-image="$DEBIAN_PYTHON" \
        --dl-host-libs=mpi "$PROBE"
    assert_success
    assert_equal "mpi rank=0 size=4 lib=/opt/slipway/hostlibs/libmpi.so.40
mpi rank=1 size=4 lib=/opt/slipway/hostlibs/libmpi.so.40
mpi rank=2 size=4 lib=/opt/slipway/hostlibs/libmpi.so.40
mpi rank=3 size=4 lib=/opt/slipway/hostlibs/libmpi.so.40" "$(task_lines 'mpi ')"
}

test_without_injection_the_image_keeps_its_libmpi() {
    run_job srun --mpi=pmix -N1 -n2 -K --container-image="$DEBIAN_PYTHON" "$PROBE"
    assert_success
    assert_equal 2 "$(task_lines 'mpi ' | grep -c 'lib=/usr/lib/x86_64-linux-gnu/libmpi.so.40')" \
        "tasks with the image's libmpi"
}

test_other_soname_is_refused_with_both_names() {
    run_job srun -N1 -n1 -K --container-image="$MPICH_ABI" --dl-host-libs=mpi true
    assert_failure
    assert_output_contains "slipway: host libmpi.so.40 ($HOST_LIBMPI, set 'mpi') cannot replace the image's libmpi.so.12: the soname majors differ (40 vs 12); use an image built against libmpi.so.40, or run without --dl-host-libs=mpi"
}

test_unknown_set_names_the_configured_ones() {
    run_job srun -N1 -n1 -K --container-image="$MPICH_ABI" --dl-host-libs=ofi true
    assert_failure
    assert_output_contains "--dl-host-libs=ofi: this node has no host library set 'ofi' (configured: mpi, nccl)"
}

test_program_linked_against_libnccl_loads_the_hosts_nccl() {
    run_job srun -N1 -n1 -K --container-image="$NCCL_APP" nccl-version
    assert_success
    assert_output_contains "nccl 21801 /usr/lib/x86_64-linux-gnu/libnccl.so.2.18.1"
    run_job srun -N2 -n2 -K --container-image="$NCCL_APP" --dl-host-libs=nccl nccl-version
    assert_success
    assert_equal "nccl 22809 /opt/slipway/hostlibs/libnccl.so.2
nccl 22809 /opt/slipway/hostlibs/libnccl.so.2" "$(task_lines 'nccl ')"
}
