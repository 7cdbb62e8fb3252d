# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Shared setup of the test_dl_*.bash files (issue 5): the sandbox with the plugin configured with
# the host library sets these tests use: the host's OpenMPI (mpi), NCCL from /usr/local/cuda (nccl).
readonly DL_HOST_LIBS='host_libs=mpi:libmpi.so.40;nccl:libnccl.so.2'

dl_require_sandbox() {
    [[ ${SLIPWAY_PLUGIN_ARGS:-} == *"$DL_HOST_LIBS"* ]] ||
        export SLIPWAY_PLUGIN_ARGS="${SLIPWAY_PLUGIN_ARGS:+$SLIPWAY_PLUGIN_ARGS }$DL_HOST_LIBS"
    require_sandbox
    require_plugin
}

# The lines of $output that start with PREFIX, sorted: one per task.
task_lines() { printf '%s\n' "${lines[@]}" | grep "^$1" | sort; }
