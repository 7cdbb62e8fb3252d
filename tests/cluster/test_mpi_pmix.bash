# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# MPI and PMIx through the container on the sandbox, with no mpirun: an OpenMPI program in
# `debian-python` runs MPI_Allreduce over 4 nodes x 2 tasks under srun --mpi=pmix; the two ranks of
# a node share memory (vader) with cross-memory attach forced, which OpenMPI refuses unless they
# share one user namespace; a PMIx client completes Put/Commit/Fence/Get across nodes (also as root
# inside); srun --mpi=pmi2 hands PMI_FD to the task, and a PMI-1 exchange over it works. The same
# PMIx exchanges and MPI through `slipway run` as the task, which sets PMIx up as the plugin does
# (launcher/step/step.h task_entry): the server's directory bound, munge with root inside.
# The programs (tests/cluster/programs/) are compiled on the host into the job user's home.

setup_file() {
    require_sandbox
    require_plugin
    command -v mpicc >/dev/null || skip "mpicc missing (libopenmpi-dev)"
    pkg-config --exists pmix || skip "pmix.pc missing (libpmix-dev)"
    require_images debian-python
    PYTHON=$(image_ref debian-python)
    BIN=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-mpi
    rm -rf "$BIN"
    mkdir -p "$BIN"
    local src=$REPO_DIR/tests/cluster/programs
    cp "$src/pmi1_client.py" "$BIN/"
    mpicc -O2 -Wall -o "$BIN/mpi_allreduce" "$src/mpi_allreduce.c" || fail "cannot compile mpi_allreduce.c"
    # shellcheck disable=SC2046
    cc -O2 -Wall -o "$BIN/pmix_client" "$src/pmix_client.c" $(pkg-config --cflags --libs pmix) \
        || fail "cannot compile pmix_client.c"
    install -m 0755 "${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}/launcher/slipway" "$BIN/slipway"
    chown -R slwuser: "$BIN"
}

teardown_file() { rm -rf "$BIN"; }

# Each rank's line: "rank R/N host H userns U sum S large ok".
test_mpi_allreduce_4_nodes_x_2_tasks_without_mpirun() {
    run_job srun --mpi=pmix -N4 --ntasks-per-node=2 -K --container-image="$PYTHON" "$BIN/mpi_allreduce"
    assert_success
    assert_equal 8 "$(grep -Ec '^rank [0-7]/8 host node[1-4] userns user:\[[0-9]+\] sum 28 large ok$' <<<"$output")" "correct ranks"
    assert_equal "0 1 2 3 4 5 6 7 " "$(sed -n 's|^rank \([0-9]\)/8 .*|\1|p' <<<"$output" | sort -n | tr '\n' ' ')" "ranks"
    # One user namespace per node: the two ranks of a node share it, nodes do not.
    assert_equal 4 "$(awk '/^rank /{print $4, $6}' <<<"$output" | sort -u | wc -l)" "(node, user namespace) pairs"
    assert_equal 4 "$(awk '/^rank /{print $6}' <<<"$output" | sort -u | wc -l)" "user namespaces"
}

# Only the shared-memory BTL, and CMA single copy forced: OpenMPI aborts ("CMA support is not
# available due to different user namespaces") unless both ranks are in one user namespace.
test_ranks_of_a_node_share_memory_with_cross_memory_attach() {
    run_job env OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=cma \
        srun --mpi=pmix -N1 -w node2 -n2 -K --container-image="$PYTHON" "$BIN/mpi_allreduce"
    assert_success
    assert_equal 2 "$(grep -Ec '^rank [01]/2 host node2 .* sum 1 large ok$' <<<"$output")" "correct ranks"
    assert_output_not_contains "user namespace"
    assert_output_not_contains "CMA"
}

test_pmix_put_commit_fence_get_across_nodes() {
    run_job srun --mpi=pmix -N4 --ntasks-per-node=2 -K --container-image="$PYTHON" "$BIN/pmix_client"
    assert_success
    assert_equal 8 "$(grep -Ec '^pmix rank [0-7]/8 host node[1-4] peers ok$' <<<"$output")" "ranks that got every peer"
    assert_output_not_contains "ERROR"      # e.g. the ds12 lock error without PMIX_SERVER_TMPDIR
}

test_pmix_with_root_inside() {
    run_job srun --mpi=pmix -N2 --ntasks-per-node=2 -K --container-image="$PYTHON" --container-remap-root \
        --container-mounts="$BIN" "$BIN/pmix_client"
    assert_success
    assert_equal 4 "$(grep -Ec '^pmix rank [0-3]/4 host node[1-4] peers ok$' <<<"$output")" "ranks that got every peer"
}

test_pmi2_passes_pmi_fd_into_the_container() {
    run_job srun --mpi=pmi2 -N4 --ntasks-per-node=2 -K --container-image="$PYTHON" \
        python3 "$BIN/pmi1_client.py"
    assert_success
    assert_equal 8 "$(grep -Ec '^pmi rank [0-7]/8 host node[1-4] peers ok$' <<<"$output")" "ranks that got every peer"
}

test_mpi_in_a_batch_script() {
    local script=$BIN/job.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$PYTHON
#SBATCH -N2 --ntasks-per-node=2 --time=2
srun --mpi=pmix -K $BIN/mpi_allreduce
EOS
    run_batch "$script"
    echo "$output" >&2
    assert_success
    assert_equal 4 "$(grep -Ec '^rank [0-3]/4 .* sum 6 large ok$' <<<"$output")" "correct ranks"
}

test_mpi_under_salloc() {
    run_job salloc -N2 --ntasks-per-node=2 --time=2 --container-image="$PYTHON" srun --mpi=pmix -K -n4 "$BIN/mpi_allreduce"
    assert_success
    assert_equal 4 "$(grep -Ec '^rank [0-3]/4 .* sum 6 large ok$' <<<"$output")" "correct ranks"
}

# `slipway run` as the task (no plugin option): PMIx and MPI work as through the plugin.
# (One PMIx client per task and step: a rank cannot connect again once it has finalized.)
test_pmix_and_mpi_through_slipway_run() {
    run_job env SLIPWAY_INSECURE_REGISTRIES="$SANDBOX_NET.1:5000" \
        srun --mpi=pmix -N2 --ntasks-per-node=2 -K "$BIN/slipway" run --container-image="$PYTHON" -- \
        "$BIN/pmix_client"
    assert_success
    assert_equal 4 "$(grep -Ec '^pmix rank [0-3]/4 host node[1-4] peers ok$' <<<"$output")" "ranks that got every peer"
    run_job env SLIPWAY_INSECURE_REGISTRIES="$SANDBOX_NET.1:5000" \
        srun --mpi=pmix -N2 --ntasks-per-node=2 -K "$BIN/slipway" run --container-image="$PYTHON" -- \
        "$BIN/mpi_allreduce"
    assert_success
    assert_equal 4 "$(grep -Ec '^rank [0-3]/4 .* sum 6 large ok$' <<<"$output")" "correct MPI ranks"
}

test_pmix_with_root_inside_through_slipway_run() {
    run_job env SLIPWAY_INSECURE_REGISTRIES="$SANDBOX_NET.1:5000" \
        srun --mpi=pmix -N2 --ntasks-per-node=2 -K "$BIN/slipway" run --container-image="$PYTHON" \
        --container-remap-root --container-mounts="$BIN" -- sh -c "echo psec=\$PMIX_MCA_psec; $BIN/pmix_client"
    assert_success
    assert_equal 4 "$(grep -cx 'psec=munge' <<<"$output")" "tasks told to prove who they are with munge"
    assert_equal 4 "$(grep -Ec '^pmix rank [0-3]/4 host node[1-4] peers ok$' <<<"$output")" "ranks that got every peer"
}

# enroot's PMIx hook (which pyxis sites install) sets PMIX_MCA_psec and PMIX_MCA_gds only where the
# job has not: a job's own choice reaches its tasks, through the plugin and through slipway run.
test_pmix_mca_settings_of_the_job_are_kept() {
    run_job env PMIX_MCA_psec=native srun --mpi=pmix -N2 -K --container-image="$PYTHON" \
        --container-remap-root sh -c 'echo "psec=$PMIX_MCA_psec"'
    assert_success
    assert_equal 2 "$(grep -cx 'psec=native' <<<"$output")" "tasks keeping the job's PMIX_MCA_psec"
    run_job env SLIPWAY_INSECURE_REGISTRIES="$SANDBOX_NET.1:5000" PMIX_MCA_psec=native \
        srun --mpi=pmix -N1 -K "$BIN/slipway" run --container-image="$PYTHON" \
        --container-remap-root -- sh -c 'echo "psec=$PMIX_MCA_psec"'
    assert_success
    assert_output_contains "psec=native"
}
