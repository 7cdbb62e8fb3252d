#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""A Horovod PyTorch script for Fashion-MNIST, on libtrain: only the import line differs.

    srun --mpi=pmix -N4 -n8 --container-image=<torch> python3 torch_hvd.py --epochs 3
    python3 torch_hvd.py --batch 256 --lr 0.08   # one process, the same global batch and LR

--dtype float64 trains in double precision: the only difference left between 8 ranks and one
process with the same global batch is then the order of each gradient's sums, which float32
amplifies over a run into a different model (tests/cluster/test_torch.bash says by how much).

Written as a Horovod user writes one: each rank trains on its DistributedSampler shard with
`--batch` samples per step (the global batch is size x batch), the learning rate is scaled by the
number of ranks, rank 0's weights and optimizer state are broadcast, DistributedOptimizer averages
the gradients, test metrics are averaged with allreduce, and rank 0 checkpoints (--checkpoint;
a run resumes from it). --die-rank/--die-step make one rank SIGKILL itself, to test failures.
"""
import argparse
import gzip
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import libtrain.torch as hvd

DATA = os.environ.get("FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def read_idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def dataset(split, limit=0):
    """Fashion-MNIST as (N, 1, 28, 28) floats of the default dtype, normalized with the training set's mean and
    deviation, and int64 labels; the first `limit` samples when limit > 0."""
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{prefix}-images-idx3-ubyte.gz").unsqueeze(1).to(torch.get_default_dtype())
    x = (x / 255 - 0.2860) / 0.3530
    y = read_idx(f"{prefix}-labels-idx1-ubyte.gz").long()
    return TensorDataset(x[:limit], y[:limit]) if limit else TensorDataset(x, y)


class Net(nn.Module):
    """A small MLP: cheap enough for 8 ranks on a 2-core node, six gradient tensors to average."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc3(F.relu(self.fc2(x)))


def metric_average(val, name):
    return hvd.allreduce(torch.tensor(val), name=name).item()


def test(model, loader):
    """Accuracy over this rank's shard of the test set, averaged over the ranks."""
    model.eval()
    hits, seen = 0, 0
    with torch.no_grad():
        for x, y in loader:
            hits += int((model(x).argmax(1) == y).sum())
            seen += len(y)
    model.train()
    return metric_average(hits / seen, "avg_accuracy")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="batch size per rank")
    ap.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank (scaled by size)")
    ap.add_argument("--limit", type=int, default=0, help="use the first N training samples")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                    help="of the model, the data and the gradients")
    ap.add_argument("--checkpoint", default="", help="rank 0 saves here after every epoch; resumes from it")
    ap.add_argument("--die-rank", type=int, default=-1, help="this rank SIGKILLs itself ...")
    ap.add_argument("--die-step", type=int, default=10, help="... at this step (counted over epochs)")
    return ap.parse_args()


def train(args):
    hvd.init()
    torch.set_num_threads(1)  # ranks share a node's cores; one thread each does not oversubscribe
    torch.set_default_dtype(getattr(torch, args.dtype))
    torch.manual_seed(42 + hvd.rank())  # different on purpose: broadcast_parameters fixes it

    train_set, test_set = dataset("train", args.limit), dataset("test")
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=7)
    train_loader = DataLoader(train_set, batch_size=args.batch, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = DataLoader(test_set, batch_size=1000, sampler=test_sampler)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    start_epoch = 0
    if args.checkpoint and hvd.rank() == 0 and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"]
    start_epoch = hvd.broadcast_object(start_epoch, root_rank=0, name="start_epoch")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    if hvd.rank() == 0:
        print(f"training on {hvd.size()} ranks ({hvd.local_size()} on this node), {len(train_set)} "
              f"samples, global batch {args.batch * hvd.size()}", flush=True)
    begin, acc, step = time.time(), 0.0, 0
    for epoch in range(start_epoch, args.epochs):
        train_sampler.set_epoch(epoch)
        start = time.time()
        for x, y in train_loader:
            if hvd.rank() == args.die_rank and step == args.die_step:
                print(f"rank {hvd.rank()}: killing myself (SIGKILL) at step {step}", flush=True)
                os.kill(os.getpid(), 9)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            step += 1
        acc = test(model, test_loader)
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: test accuracy {acc:.4f} ({time.time() - start:.1f} s)", flush=True)
            if args.checkpoint:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch + 1}, args.checkpoint)
    if hvd.rank() == 0:
        print(f"final test accuracy {acc:.4f} after {args.epochs} epochs on {hvd.size()} ranks "
              f"({time.time() - begin:.1f} s)", flush=True)
    hvd.shutdown()


def main():
    args = parse_args()
    try:
        train(args)
    except Exception as e:  # a dead peer or a timeout: one greppable line per rank, then exit 1
        try:
            rank = hvd.rank()
        except Exception:  # not initialized, or the library is gone too
            rank = "?"
        print(f"torch_hvd.py: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
