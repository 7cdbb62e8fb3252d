#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The many-core table of issue 29 in one go, on a lent machine with many cores (and no Slurm):
# builds libtrain's Python module from this checkout against the Python that has PyTorch
# (installing torch, torchvision and pybind11 with pip when it lacks them and pip can reach an
# index), then runs bench/torch/run.bash --native for 2, 4 and 8 ranks, both models, 3 rounds.

# Usage: bench/torch/many_core.bash [--python PATH] [--out DIR] [run.bash options...]
#   e.g. bench/torch/many_core.bash --python /opt/venv/bin/python3 --ranks "2 4" --rounds 4
# Later options override the defaults (--ranks "2 4 8" --rounds 3 --models "mlp resnet18").
# Add --env LIBTRAIN_COMPUTE_THREADS=0 for the waiters' old spinning (A/B of the CPU sharing).
# The build goes to build-bench/ (about 25 s with g++); the table and the records to --out.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY=python3 OUT=/tmp/bench-torch-many-core-$(date +%Y%m%d-%H%M%S)
ARGS=()
while (($#)); do
    case $1 in
        --python) PY=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '9,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
die() { echo "many_core: $*" >&2; exit 1; }

if ! "$PY" -c 'import torch, torchvision, numpy' 2>/dev/null; then
    echo "# installing torch, torchvision and numpy for $PY (pip)" >&2
    "$PY" -m pip install -q torch torchvision numpy ||
        die "$PY lacks torch/torchvision/numpy and pip could not install them; pass --python"
fi
PYBIND=()  # pip's pybind11, else the system's CMake package (Debian's pybind11-dev)
if ! PYBIND_DIR=$("$PY" -m pybind11 --cmakedir 2>/dev/null) && [[ ! -d /usr/lib/cmake/pybind11 ]]; then
    "$PY" -m pip install -q pybind11 || die "no pybind11 for $PY, and pip could not install it"
    PYBIND_DIR=$("$PY" -m pybind11 --cmakedir)
fi
[[ -n ${PYBIND_DIR:-} ]] && PYBIND=(-Dpybind11_DIR="$PYBIND_DIR")
cmake -S "$REPO" -B "$REPO/build-bench" -DCMAKE_BUILD_TYPE=Release -DSLIPWAY_BUILD_TESTS=OFF \
    -DSLIPWAY_BUILD_LAUNCHER=OFF -DPython3_EXECUTABLE="$(command -v "$PY")" "${PYBIND[@]}" \
    >"$REPO/build-bench.log" 2>&1 || die "cmake failed: see $REPO/build-bench.log"
cmake --build "$REPO/build-bench" --target libtrain_python -j"$(nproc)" >>"$REPO/build-bench.log" 2>&1 ||
    die "building libtrain's Python module failed: see $REPO/build-bench.log"

exec "$HERE/run.bash" --native --python "$PY" --build "$REPO/build-bench" --out "$OUT" \
    --ranks "2 4 8" --rounds 3 --models "mlp resnet18" "${ARGS[@]}"
