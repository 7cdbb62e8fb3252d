#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The GPU node check (issue 27): on a bare GPU node (no network, no Slurm, no package manager), from
# the bundle make-bundle.sh builds, checks what GPU users of Slipway rely on, as the job user:
# `slipway doctor`, the bundle's CUDA image imported and run with the default exposure (the
# image's NVIDIA_VISIBLE_DEVICES=all) and with --dl-gpus=1 (nvidia-smi -L and a CUDA kernel inside,
# also with LD_LIBRARY_PATH unset), NVIDIA_VISIBLE_DEVICES=void giving no GPU, and libtrain's GPU
# tests (NCCL communicator, ranks sharing a GPU refused by name, the gpu-standin cases on the real
# CUDA and NCCL). Prints one line per check and one
# summary line; exits 0 when all passed, 1 when one failed, 77 (skipped) on a node without GPU.
#   gpu-node-check.sh [-v]      (-v: show every check's output)
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
verbose=0
[[ ${1:-} == -v ]] && verbose=1
start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-node-check.XXXXXX")
trap 'rm -rf "$work" 2>/dev/null' EXIT
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SLIPWAY_CACHE_DIR=$work/cache
slipway=$bundle/bin/slipway
image=$bundle/image
passed=0 failed=0 skipped=0

# check NAME EXPECT CMD...: runs CMD (120 s at most); passes when it succeeds and its output
# matches the extended regex EXPECT (empty: anything).
check() {
    local name=$1 expect=$2 out rc
    shift 2
    out=$(timeout 120 "$@" 2>&1)
    rc=$?
    if ((rc == 0)) && [[ -z $expect || $out =~ $expect ]]; then
        printf 'ok    %s\n' "$name"
        passed=$((passed + 1))
    elif ((rc == 77)); then
        printf 'skip  %s\n' "$name"
        skipped=$((skipped + 1))
    else
        printf 'FAIL  %s (status %d%s)\n' "$name" "$rc" "${expect:+, want /$expect/}"
        sed 's/^/      | /' <<<"$out"
        failed=$((failed + 1))
        return 1
    fi
    ((verbose)) && sed 's/^/      | /' <<<"$out"
    return 0
}

summary() {
    printf 'gpu-node-check: %d passed, %d failed, %d skipped in %ds%s\n' "$passed" "$failed" \
        "$skipped" $((SECONDS - start)) "${1:+ ($1)}"
}

# No GPU: every check is skipped, never passed.
if [[ ! -e /dev/nvidiactl ]] || ! compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
    skipped=8
    summary "no NVIDIA GPU on $(hostname): /dev/nvidiactl or /dev/nvidiaN missing"
    exit 77
fi
[[ -x $slipway && -d $image ]] || { echo "gpu-node-check: $bundle is not a bundle (make-bundle.sh)"; exit 1; }
host_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "gpu-node-check: $(hostname), $host_gpus GPU(s) by the host's nvidia-smi; driver $(sed -n 's/.*Kernel Module *\([0-9.]*\).*/\1/p' /proc/driver/nvidia/version 2>/dev/null)"

check "slipway doctor: user namespaces, overlay, GPUs and driver" 'ok +gpus: ' "$slipway" doctor
check "slipway import of the bundle's CUDA image" '' "$slipway" import "$image"
# Default exposure, as pyxis+enroot: the image's NVIDIA_VISIBLE_DEVICES=all.
check "default exposure: nvidia-smi -L lists the node's $host_gpus GPU(s)" "^$host_gpus\$" \
    "$slipway" run --container-image="$image" -- sh -c 'nvidia-smi -L | grep -c "^GPU "'
check "default exposure: a CUDA kernel on every GPU, LD_LIBRARY_PATH unset" \
    "cuda-check: $host_gpus device\\(s\\), kernel ok" \
    "$slipway" run --container-image="$image" -- env -u LD_LIBRARY_PATH cuda-check
check "--dl-gpus=1: one GPU, nvidia-smi and a CUDA kernel" 'GPU 0: .*cuda-check: 1 device\(s\), kernel ok' \
    "$slipway" run --container-image="$image" --dl-gpus=1 -- sh -c 'nvidia-smi -L; cuda-check'
check "NVIDIA_VISIBLE_DEVICES=void: no GPU in the container" 'cuda-check: (no CUDA device|cudaGetDeviceCount: )' \
    env NVIDIA_VISIBLE_DEVICES=void "$slipway" run --container-image="$image" -- sh -c 'cuda-check; exit 0'
check "libtrain: NCCL communicator; ranks sharing a GPU refused by name" 'ok: NCCL communicator' \
    "$bundle/bin/libtrain_test_nccl"
check "launcher: the node's GPUs found and planned" '' "$bundle/bin/test_dl_gpu_real"
# The gpu-standin cases that can run on this node's real CUDA and NCCL (one rank per GPU; those
# that need the stand-in's own calls or more GPUs say "skipped: ..." and are left out).
check "libtrain: the gpu-standin cases on the real CUDA and NCCL" '100%: Checks: [1-9][0-9]*, Failures: 0, Errors: 0' \
    env -u CK_RUN_CASE "$bundle/bin/libtrain_test_gpu_standin"
summary
((failed == 0))
