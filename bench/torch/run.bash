#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# bench/torch: time per PyTorch training step, DDP on Gloo against DDP on the "libtrain" backend
# and libtrain.torch's DistributedOptimizer, for a communication-bound MLP and a compute-bound
# ResNet-18: natively on this node (--native) or on sandbox shapes through the plugin.

# Usage (--help prints this):
#   bench/torch/run.bash --native [--ranks "2 4"] [--threads N | --comm-cpus N] [--pin] [--perf]
#       [--python PATH] [--build DIR] [common options]
#   bench/torch/run.bash [--shapes "1x2 2x1 4x1 2x2"] [--image REF] [--setup] [common options]
#                                                                   (sandbox mode, as root)
#   common: [--rounds N] [--blocks N] [--block-steps N] [--warmup N] [--models "mlp resnet18"]
#       [--modes "gloo libtrain hvd"] [--out DIR] [--timeline] [--trace] [--env "VAR=VALUE ..."]
#       [--comm-only] [--openblas]
# --native: each round launches, for each rank count and model, that many local ranks of
# step_bench.py with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (env://), PYTHONPATH on --build's
# libtrain (default build/), --threads torch threads per rank (default: CPUs / ranks, less
# --comm-cpus per rank left to the communication threads, at least 1), --pin: each
# rank on its own CPUs (taskset), --perf: each under `perf record -g` (raw/*.perf.RANK);
# --comm-only is implied. Sandbox mode needs a sandbox up (SLIPWAY_SANDBOX_INSTANCE picks which)
# with tmpfs node directories and the torch image pushed: --setup does both; with --rounds 0 it
# stops there. One srun per round, shape and model.
# Every mode runs block by block in one process; the per-rank JSON records stay in --out/raw and
# summarize.py prints the table. --openblas: the ranks load Debian 12's OpenBLAS (apt-get download)
# instead of the image's or the host's libblas.so.3 (netlib's, unless an optimised one is
# installed). --env: more variables for every rank (LIBTRAIN_RING_SPIN_US=0, ...). --comm-only:
# also time the gradients' allreduce alone on each DDP group. --trace: a timeline of every step's
# phases, buckets and collectives per rank (summarize.py prints where the time goes).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SANDBOX=$REPO/contrib/sandbox/slipway-sandbox
INSTANCE=${SLIPWAY_SANDBOX_INSTANCE:-0}
if ((INSTANCE == 0)); then SANDBOX_DIR=/var/lib/slipway-sandbox; else SANDBOX_DIR=/var/lib/slipway-sandbox-$INSTANCE; fi
ROUNDS=3 BLOCKS=4 BLOCK_STEPS=4 WARMUP=3 SETUP=0 TIMELINE=0 OPENBLAS=0 IMAGE= EXTRA_ENV= COMM_ONLY=
NATIVE=0 RANKS="2 4" THREADS=0 COMM_CPUS=0 PIN=0 PERF=0 TRACE= BUILD=$REPO/build PYTHON=python3
[[ -x /usr/bin/python3 ]] && PYTHON=/usr/bin/python3  # Debian's python3-torch, not a pyenv shim
SHAPES="1x2 2x1 4x1 2x2" MODELS="mlp resnet18" MODES="gloo libtrain hvd"
OUT=/tmp/bench-torch-$(date +%Y%m%d-%H%M%S)
JOB_USER=slwuser

die() { echo "bench/torch: $*" >&2; exit 1; }
say() { echo "# $*" >&2; }

while (($#)); do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --blocks) BLOCKS=$2; shift 2 ;;
        --block-steps) BLOCK_STEPS=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --shapes) SHAPES=$2; shift 2 ;;
        --models) MODELS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --image) IMAGE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeline) TIMELINE=1; shift ;;
        --openblas) OPENBLAS=1; shift ;;
        --env) EXTRA_ENV=$2; shift 2 ;;
        --comm-only) COMM_ONLY=--comm-only; shift ;;
        --setup) SETUP=1; shift ;;
        --native) NATIVE=1; shift ;;
        --ranks) RANKS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --pin) PIN=1; shift ;;
        --comm-cpus) COMM_CPUS=$2; shift 2 ;;
        --perf) PERF=1; shift ;;
        --python) PYTHON=$2; shift 2 ;;
        --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
        --trace) TRACE=1; shift ;;
        *) sed -n '8,29s/^# \{0,1\}//p' "$0"; exit 2 ;;
    esac
done
if ((NATIVE)); then
    # shellcheck source=bench/torch/native.bash
    source "$HERE/native.bash"
    exit
fi
[[ $EUID -eq 0 ]] || die "run as root (it drives the sandbox; the jobs run as $JOB_USER)"

nodes_needed=0
for s in $SHAPES; do
    [[ $s =~ ^([0-9]+)x([0-9]+)$ ]] || die "shape '$s' is not NODESxTASKS"
    ((BASH_REMATCH[1] > nodes_needed)) && nodes_needed=${BASH_REMATCH[1]}
done

# Node directories on tmpfs: the root disk of the development VM is slow (docs/platform.md), and
# a node's mount namespace binds its directory when slurmd starts, so the tmpfs goes under it
# between `down` and `up`.
# Only the nodes the shapes use: a bigger sandbox before (bench/scale) leaves more node directories.
node_dirs_on_tmpfs() {
    local d i
    for ((i = 1; i <= nodes_needed; i++)); do
        for d in "$SANDBOX_DIR/nodes/node$i"/{tmp,var-tmp}; do
            [[ -d $d && $(findmnt -n -o FSTYPE --target "$d") == tmpfs ]] || return 1
        done
    done
}
if ((SETUP)); then
    if ! node_dirs_on_tmpfs 2>/dev/null; then
        "$SANDBOX" down >/dev/null 2>&1 || true
        for ((i = 1; i <= (nodes_needed > 4 ? nodes_needed : 4); i++)); do
            for d in "$SANDBOX_DIR/nodes/node$i"/{tmp,var-tmp}; do
                mkdir -p "$d"
                [[ $(findmnt -n -o FSTYPE --target "$d") == tmpfs ]] ||
                    mount -t tmpfs -o size=8g,mode=1777 slipway-bench-torch "$d"
            done
        done
    fi
    "$SANDBOX" up >/dev/null
    "$SANDBOX" images torch >/dev/null || die "slipway-sandbox images torch failed (run it to see why)"
fi
[[ $("$SANDBOX" status 2>/dev/null || true) =~ slurmctld\ +running ]] ||
    die "sandbox $INSTANCE is not up (--setup, or slipway-sandbox up)"
node_dirs_on_tmpfs || die "the node directories of $SANDBOX_DIR are not tmpfs: rerun with --setup"
grep -q '^required' "$SANDBOX_DIR/etc/plugstack.conf" || die "the plugin is not in plugstack.conf"
[[ -n $IMAGE ]] || IMAGE=$("$SANDBOX" image torch)
if ((ROUNDS == 0)); then
    say "sandbox $INSTANCE ready (tmpfs node directories, $IMAGE); no rounds asked"
    exit 0
fi

# The benchmark's script and its traces live on /dev/shm (tmpfs, seen by every node's namespace),
# bound into the container at /bench.
mkdir -p "$OUT/raw"
WORK=$(mktemp -d /dev/shm/slipway-bench-torch.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cp "$HERE/step_bench.py" "$WORK/"
BLAS_ENV=
if ((OPENBLAS)); then
    (cd "$OUT" && apt-get download libopenblas0-pthread >/dev/null 2>&1) ||
        die "apt-get download libopenblas0-pthread failed"
    dpkg-deb -x "$OUT"/libopenblas0-pthread_*.deb "$OUT/openblas"
    cp -a "$OUT"/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread "$WORK/blas"
    BLAS_ENV=LD_LIBRARY_PATH=/bench/blas
fi
chown -R "$JOB_USER:" "$WORK"
chmod 755 "$WORK"

srun_in() {   # srun_in NODES TASKS_PER_NODE CMD...: CMD as every rank, in the torch image
    local n=$1 t=$2
    shift 2
    "$SANDBOX" exec -- env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $BLAS_ENV $EXTRA_ENV ${LT_ENV:-} \
        timeout 900 srun --mpi=pmix -K -N"$n" --ntasks-per-node="$t" \
        --container-image="$IMAGE" --container-mounts="$WORK:/bench" "$@"
}

{
    echo "date: $(date -Is)"
    echo "commit: $(git -C "$REPO" log -1 --format='%h %s' 2>/dev/null)"
    echo "dirty: $(git -C "$REPO" status --porcelain -- libtrain | wc -l) changed files under libtrain/"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, kernel $(uname -r)"
    echo "image: $IMAGE"
    echo "rounds $ROUNDS, blocks $BLOCKS x $BLOCK_STEPS steps per mode, warmup $WARMUP, modes $MODES, openblas $OPENBLAS, env: ${EXTRA_ENV:-none}"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/meta.txt"

say "image $IMAGE on every node (the first import is not timed)"
srun_in "$nodes_needed" 1 python3 -c 'import torch, torchvision, libtrain.torch' >/dev/null ||
    die "the image does not start, or lacks torch/torchvision/libtrain.torch"

for ((r = 1; r <= ROUNDS; r++)); do
    for shape in $SHAPES; do
        n=${shape%x*} t=${shape#*x}
        for model in $MODELS; do
            name=r$r.$shape.$model
            say "round $r/$ROUNDS: $shape $model ($(cut -d' ' -f1 /proc/loadavg))"
            LT_ENV=
            ((TIMELINE)) && LT_ENV="LIBTRAIN_TIMELINE=/bench/$name.timeline.%r.json"
            srun_in "$n" "$t" python3 /bench/step_bench.py --model "$model" --modes "${MODES// /,}" \
                --blocks "$BLOCKS" --block-steps "$BLOCK_STEPS" --warmup "$WARMUP" --threads 1 $COMM_ONLY \
                --tag "$r $shape" ${TRACE:+--trace} --out "/bench/$name.rank%r.json" >"$OUT/raw/$name.out" 2>"$OUT/raw/$name.err" ||
                say "$name exited with an error (see $OUT/raw/$name.err)"
            mv "$WORK/$name".rank*.json "$OUT/raw/" 2>/dev/null || say "$name: no rank wrote its record"
        done
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"
((TIMELINE)) && cp "$WORK"/*.json "$OUT/raw/" 2>/dev/null || true
cat "$OUT/meta.txt"
python3 "$HERE/summarize.py" "$OUT"
say "per-rank records: $OUT/raw"
