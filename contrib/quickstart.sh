#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Slipway quickstart on a Debian 12 machine, as root: installs the packages, builds, starts the local
# Slurm sandbox (4 nodes in network namespaces, a registry, test images) and runs a containerized
# job across the 4 nodes. Leaves the sandbox up and says how to use and stop it. Safe to run twice.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SLIPWAY_BUILD_DIR:-$repo/build}
sandbox="$repo/contrib/sandbox/slipway-sandbox"

"$repo/contrib/install-deps.sh"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"
SLIPWAY_PLUGIN="$build/spank/spank_slipway.so" "$sandbox" up
"$sandbox" images busybox debian-python demo

# The demo image is debian-python plus libtrain and Fashion-MNIST: 8 ranks train an MLP together.
image=$("$sandbox" image demo)
job=(srun --mpi=pmix -N4 -n8 -K --time=5 --container-image="$image"
     python3 /usr/share/libtrain/examples/train.py --epochs 3)
echo
echo "\$ ${job[*]}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$sandbox" exec -- "${job[@]}" 2>&1 | tee "$log"; then
    # Slurm 22.05's own race (docs/platform.md, "PMIx"); anything else fails the quickstart.
    grep -q 'Munge decode failed: Unauthorized credential' "$log" || exit 1
    echo "Slurm refused a PMIx peer while its slurmstepd acted as the job user (a Slurm 22.05 race," \
         "docs/platform.md \"PMIx\"): running the job once more."
    "$sandbox" exec -- "${job[@]}"
fi

# PyTorch (libtrain.torch) is not the demo: the torch image (Debian's PyTorch, 1 GB) takes 3 to 8
# minutes to build the first time, which would take the quickstart past 10 minutes.
cat <<EOT

PyTorch on libtrain (README.md, "Training with PyTorch"): build the torch image once (a few
minutes), then run a Horovod-style script, or a DDP one on the "libtrain" backend:
  $sandbox images torch
  $sandbox exec -- srun --mpi=pmix -N4 -n8 --container-image=\$($sandbox image torch) \\
      python3 /usr/share/libtrain/examples/torch_hvd.py --epochs 2
  $sandbox exec -- srun -N4 -n8 --container-image=\$($sandbox image torch) \\
      python3 /usr/share/libtrain/examples/torch_ddp.py --backend libtrain
EOT

cat <<EOT

The sandbox is still up. Try, as the job user:
  $sandbox exec -- srun -N2 -n4 --container-image=$("$sandbox" image busybox) cat /etc/slipway-image
  $sandbox exec -- bash      # a shell where srun, sbatch, salloc, squeue and slipway work
Stop it with:
  $sandbox down
EOT
