#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Runs every shape of bench/allreduce that issue 6 sets targets for, each several times, and
# summarises each size by the median over runs of libtrain's busbw ratio to OpenMPI and to Gloo
# (and the worst run's ratio): on a shared machine one run can land in a slow spell, and the
# median of interleaved runs is what a ratio can be trusted for. Raw tables stay in --out.
#
#   bench/allreduce/run_all.sh [--bench PATH] [--runs N] [--best-of N] [--out DIR] [--no-cluster]
#
# In-node shapes run under mpirun (as root it sets OMPI_ALLOW_RUN_AS_ROOT*); the across-node
# shapes run under srun --mpi=pmix on the sandbox (contrib/sandbox/slipway-sandbox up first).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bench=$repo/build/bench/allreduce/allreduce_bench
runs=3 best_of=3 out=$(mktemp -d /tmp/allreduce-bench.XXXXXX) cluster=1
while (($#)); do
  case $1 in
    --bench) bench=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --best-of) best_of=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-cluster) cluster=0; shift ;;
    *) echo "run_all: unknown argument '$1'; see the comment at the top of $0" >&2; exit 2 ;;
  esac
done
[[ -x $bench ]] || { echo "run_all: no benchmark at $bench; build it: cmake --build build --target allreduce_bench" >&2; exit 1; }
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sandbox=$repo/contrib/sandbox/slipway-sandbox

# name | launcher words (the bench's arguments follow)
shapes=(
  "node-2ranks|mpirun -np 2 --bind-to core|--min 4K --max 256M"
  "node-4ranks|mpirun -np 4 --oversubscribe|--min 4K --max 64M"
)
if ((cluster)); then
  if "$sandbox" exec -- sinfo -h >/dev/null 2>&1; then
    shapes+=(
      "2nodes-x1|$sandbox exec -- srun --mpi=pmix -K -N2 --ntasks-per-node=1|--min 64K --max 64M"
      "4nodes-x1|$sandbox exec -- srun --mpi=pmix -K -N4 --ntasks-per-node=1|--min 64K --max 64M"
      "2nodes-x2|$sandbox exec -- srun --mpi=pmix -K -N2 --ntasks-per-node=2|--min 64K --max 64M"
    )
  else
    echo "run_all: the sandbox is not up; across-node shapes skipped (contrib/sandbox/slipway-sandbox up)" >&2
  fi
fi

for ((r = 1; r <= runs; r++)); do
  for s in "${shapes[@]}"; do
    IFS='|' read -r name launcher args <<<"$s"
    echo "run $r/$runs: $name" >&2
    # shellcheck disable=SC2086 # the launcher and arguments are word lists
    timeout 900 $launcher "$bench" $args --best-of "$best_of" >"$out/$name.$r.txt" 2>"$out/$name.$r.err" ||
      echo "run_all: $name run $r failed; see $out/$name.$r.err" >&2
  done
done

python3 - "$out" "$runs" <<'EOF'
import glob, os, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
names = sorted({os.path.basename(p).rsplit('.', 2)[0] for p in glob.glob(out + '/*.txt')})
for name in names:
    rows = {}
    for path in sorted(glob.glob(f'{out}/{name}.*.txt')):
        for line in open(path):
            f = line.split()
            if not f or f[0].startswith('#') or len(f) < 22:
                continue
            # size count type | time algbw busbw wrong (libtrain, openmpi, gloo) | lt/mpi lt/gloo lt/bound
            # Ratios from the times: the printed busbw is rounded to 0.01 GB/s.
            lt, mpi, gloo = float(f[6]), float(f[11]), float(f[16])
            t_lt, t_mpi, t_gloo = float(f[4]), float(f[9]), float(f[14])
            wrong = int(f[7]) + int(f[12]) + int(f[17])
            rows.setdefault(int(f[0]), []).append((lt, mpi, gloo, t_mpi / t_lt, t_gloo / t_lt, float(f[-1]), wrong))
    print(f'\n{name}: median over {runs} runs (worst run in brackets); busbw GB/s')
    print(f'{"size":>10} {"libtrain":>9} {"openmpi":>8} {"gloo":>7} {"lt/mpi":>13} {"lt/gloo":>13} {"lt/bound":>8} wrong')
    for size in sorted(rows):
        v = rows[size]
        med = lambda k: statistics.median(x[k] for x in v)
        worst = lambda k: min(x[k] for x in v)
        label = f'{size >> 20} MiB' if size >= 1 << 20 else f'{size >> 10} KiB'
        print(f'{label:>10} {med(0):9.2f} {med(1):8.2f} {med(2):7.2f} {med(3):6.2f} ({worst(3):4.2f})'
              f' {med(4):6.2f} ({worst(4):4.2f}) {med(5):8.2f} {sum(x[6] for x in v)}')
EOF
echo "raw tables: $out" >&2
