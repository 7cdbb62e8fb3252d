#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Plain PyTorch DistributedDataParallel, on Gloo or on libtrain's torch.distributed backend.

    srun -N4 --ntasks-per-node=2 --container-image=<torch> python3 torch_ddp.py --backend gloo
    srun --mpi=pmix -N4 --ntasks-per-node=2 --container-image=<torch> python3 torch_ddp.py --backend libtrain

A script written for Gloo: init_process_group from the environment (env://: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, which Slipway sets for every task), a small CNN wrapped in DDP, a few
SGD steps on each rank's own batches. The only libtrain line is the import that registers the
"libtrain" backend. Every rank starts from different weights (DDP's broadcast must fix that) and
ends by printing `rank R/W: weights sha256 HEX`: on a correct run the digests are all equal.
"""
import argparse
import gzip
import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

DATA = os.environ.get("FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3)
        self.fc1 = nn.Linear(8 * 13 * 13, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def fashion_mnist_train():
    """The training images as float tensors (N, 1, 28, 28) in [0, 1] and their labels."""
    def idx(name):
        with gzip.open(os.path.join(DATA, name), "rb") as f:
            raw = f.read()
        dims = raw[3]
        shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
        return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)
    x = idx("train-images-idx3-ubyte.gz").unsqueeze(1).float() / 255
    return x, idx("train-labels-idx1-ubyte.gz").long()


def batches(args, rank, size):
    """This rank's `args.steps` batches: its own slice of Fashion-MNIST, or seeded noise."""
    if args.data == "fashion-mnist":
        x, y = fashion_mnist_train()
        for step in range(args.steps):
            start = (step * size + rank) * args.batch
            yield x[start:start + args.batch], y[start:start + args.batch]
        return
    gen = torch.Generator().manual_seed(1000 + rank)
    for _ in range(args.steps):
        yield torch.rand(args.batch, 1, 28, 28, generator=gen), torch.randint(10, (args.batch,), generator=gen)


def weights_digest(model):
    """sha256 over every parameter's bytes, in order: equal digests mean bitwise equal weights."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["gloo", "libtrain"], default="gloo")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32, help="batch size per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--data", choices=["synthetic", "fashion-mnist"], default="synthetic")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank (ranks share the cores)")
    return ap.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.backend == "libtrain":
        import libtrain.torch  # noqa: F401  registers the "libtrain" torch.distributed backend
    dist.init_process_group(args.backend, init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)  # different initial weights on purpose: DDP broadcasts rank 0's
    model = DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if rank == 0:
        print(f"ddp: backend {dist.get_backend()}, world size {size}, {args.steps} steps of "
              f"{args.batch} {args.data} samples per rank", flush=True)
    for step, (x, y) in enumerate(batches(args, rank, size)):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # DDP averages the gradients over the ranks here
        opt.step()
        if rank == 0 and (step + 1) % 10 == 0:
            print(f"step {step + 1}: loss {loss.item():.4f}", flush=True)
    print(f"rank {rank}/{size}: weights sha256 {weights_digest(model.module)}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one greppable line per failed rank, then a failed task
        rank = os.environ.get("RANK", "?")
        print(f"torch_ddp.py: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
