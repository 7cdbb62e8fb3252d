# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# bench/torch/run.bash --native: every round, rank count and model, that many ranks of
# step_bench.py on this node, launched with env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) as
# torchrun would, each with CPUs / ranks threads (or --threads), optionally pinned to its own CPUs.
# Sourced by run.bash after its options are parsed; needs no root, no Slurm and no container.

native_die() { echo "bench/torch: $*" >&2; exit 1; }
CPUS=$(nproc)
for n in $RANKS; do
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1)) || native_die "--ranks '$RANKS': each a whole number of ranks, at least 1"
done
PYPATH=$BUILD/libtrain/python
[[ -d $PYPATH/libtrain ]] ||
    native_die "no libtrain Python module under $PYPATH: build it (cmake --build build --target libtrain_python) or pass --build DIR"
PYTHONPATH=$PYPATH${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" -c 'import torch, torchvision, libtrain.torch' ||
    native_die "$PYTHON cannot import torch, torchvision and libtrain.torch (PYTHONPATH=$PYPATH); pass --python"
mkdir -p "$OUT/raw"
BLAS_DIR=
if ((OPENBLAS)); then  # Debian 12's python3-torch takes libblas.so.3: netlib's unless one is installed
    (cd "$OUT" && apt-get download libopenblas0-openmp >/dev/null 2>&1) ||
        native_die "apt-get download libopenblas0-openmp failed (--openblas)"
    dpkg-deb -x "$OUT"/libopenblas0-openmp_*.deb "$OUT/openblas"
    BLAS_DIR=$OUT/openblas/usr/lib/x86_64-linux-gnu/openblas-openmp
fi
{
    echo "date: $(date -Is)"
    echo "mode: native, ranks: $RANKS, threads per rank: $( ((THREADS)) && echo "$THREADS" || echo "CPUs / ranks - $COMM_CPUS"), pinned: $PIN"
    echo "commit: $(git -C "$REPO" log -1 --format='%h %s' 2>/dev/null)"
    echo "dirty: $(git -C "$REPO" status --porcelain -- libtrain bench | wc -l) changed files under libtrain/ and bench/"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $CPUS CPUs, kernel $(uname -r)"
    echo "python: $PYTHON, torch $(PYTHONPATH=$PYPATH "$PYTHON" -c 'import torch; print(torch.__version__)')"
    echo "rounds $ROUNDS, blocks $BLOCKS x $BLOCK_STEPS steps per mode, warmup $WARMUP, modes $MODES, env: ${EXTRA_ENV:-none}"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/meta.txt"

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# native_ranks N THREADS NAME ARGS...: N local ranks of step_bench.py ARGS; their output in raw/NAME.*
native_ranks() {
    local n=$1 t=$2 name=$3 port r cpus pids=() rc=0
    shift 3
    port=$(free_port)
    for ((r = 0; r < n; r++)); do
        local pin=() prof=()
        ((PERF)) && prof=(perf record -q -g -o "$OUT/raw/$name.perf.$r" --)
        if ((PIN)); then
            local per=$((CPUS / n > 0 ? CPUS / n : 1))  # its share, --comm-cpus included
            cpus=$((r * per % CPUS))-$((r * per % CPUS + per - 1))
            pin=(taskset -c "$cpus")
        fi
        # shellcheck disable=SC2086  # EXTRA_ENV and LT_ENV are lists of VAR=VALUE words
        env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            LIBTRAIN_BOOTSTRAP=env OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t MKL_NUM_THREADS=$t \
            PYTHONPATH=$PYPATH${PYTHONPATH:+:$PYTHONPATH} ${BLAS_DIR:+LD_LIBRARY_PATH=$BLAS_DIR} $EXTRA_ENV ${LT_ENV:-} \
            timeout 900 "${pin[@]}" "${prof[@]}" "$PYTHON" "$HERE/step_bench.py" "$@" --threads "$t" \
            --out "$OUT/raw/$name.rank%r.json" >"$OUT/raw/$name.out.$r" 2>"$OUT/raw/$name.err.$r" &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    cat "$OUT/raw/$name".err.* >"$OUT/raw/$name.err"  # summarize.py finds the runs by their .err
    rm -f "$OUT/raw/$name".err.* "$OUT/raw/$name".out.*
    return $rc
}

for ((r = 1; r <= ROUNDS; r++)); do
    for n in $RANKS; do
        t=$THREADS
        ((t > 0)) || t=$((CPUS / n - COMM_CPUS > 0 ? CPUS / n - COMM_CPUS : 1))
        for model in $MODELS; do
            name=r$r.1x$n.$model
            say "round $r/$ROUNDS: $n ranks x $t threads, $model ($(cut -d' ' -f1 /proc/loadavg))"
            LT_ENV=
            ((TIMELINE)) && LT_ENV="LIBTRAIN_TIMELINE=$OUT/raw/$name.timeline.%r.json"
            native_ranks "$n" "$t" "$name" --model "$model" --modes "${MODES// /,}" --blocks "$BLOCKS" \
                --block-steps "$BLOCK_STEPS" --warmup "$WARMUP" --comm-only ${TRACE:+--trace} --tag "$r 1x$n" ||
                say "$name: a rank exited with an error (see $OUT/raw/$name.err)"
        done
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"
cat "$OUT/meta.txt"
"$PYTHON" "$HERE/summarize.py" "$OUT"
say "per-rank records: $OUT/raw"
