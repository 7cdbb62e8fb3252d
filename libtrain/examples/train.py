#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Data-parallel numpy MLP on Fashion-MNIST with libtrain.

    srun --mpi=pmix -N4 -n8 --container-image=<demo> python3 /usr/share/libtrain/examples/train.py
    python3 train.py                     # one process: the reference accuracy

Every rank reads the IDX files, takes its share of each global batch (the same global batch for
any number of ranks, and the same initial weights, broadcast from rank 0, so the accuracy matches
the single-process run), averages gradients with DistributedOptimizer; rank 0 evaluates and
checkpoints. --dtype float64 trains in double precision, where 8 ranks and one process differ
only by the order of each gradient's sums (tests/cluster/test_libtrain.bash). --die-rank/--die-step
make one rank SIGKILL itself (to test failure handling).
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np

import libtrain

DATA = os.environ.get("FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
DTYPE = np.float32  # of the weights, the data and the gradients: --dtype


def read_idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split, limit=0):
    """Images as uint8 rows (converted to float per batch: 8 ranks x 188 MB of float32 would
    not fit a small node), labels as int64; the first `limit` samples when limit > 0."""
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{prefix}-images-idx3-ubyte.gz").reshape(-1, 784)
    y = read_idx(f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return (x[:limit], y[:limit]) if limit else (x, y)


def floats(x):
    return x.astype(DTYPE) / DTYPE(255.0)


def init_params(hidden, seed):
    """Drawn as float32 in either dtype: float64 starts from float32's initial weights."""
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((784, hidden)) * np.sqrt(2 / 784)).astype(np.float32).astype(DTYPE),
        "b1": np.zeros(hidden, DTYPE),
        "w2": (rng.standard_normal((hidden, 10)) * np.sqrt(2 / hidden)).astype(np.float32).astype(DTYPE),
        "b2": np.zeros(10, DTYPE),
    }


def forward_backward(p, x, y, scale):
    """Loss gradients of the mean cross-entropy over the *global* batch (scale = 1/global)."""
    h = np.maximum(x @ p["w1"] + p["b1"], 0)
    logits = h @ p["w2"] + p["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    prob[np.arange(len(y)), y] -= 1
    d_logits = prob * scale
    dh = (d_logits @ p["w2"].T) * (h > 0)
    return [x.T @ dh, dh.sum(0), h.T @ d_logits, d_logits.sum(0)]


def accuracy(p, x, y):
    hits = 0
    for i in range(0, len(x), 2000):
        h = np.maximum(floats(x[i:i + 2000]) @ p["w1"] + p["b1"], 0)
        hits += int(((h @ p["w2"] + p["b2"]).argmax(1) == y[i:i + 2000]).sum())
    return hits / len(x)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256, help="global batch size")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0, help="use the first N training samples")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--checkpoint", default="")
    ap.add_argument("--die-rank", type=int, default=-1, help="this rank SIGKILLs itself ...")
    ap.add_argument("--die-step", type=int, default=10, help="... at this global step")
    return ap.parse_args()


def train(args):
    global DTYPE
    DTYPE = np.dtype(args.dtype).type
    libtrain.init()
    rank, size = libtrain.rank(), libtrain.size()
    x, y = load("train", args.limit)
    xt, yt = load("test")
    params = init_params(args.hidden, seed=1234 + rank)  # differ on purpose: broadcast fixes it
    libtrain.broadcast_parameters(params, root=0)
    names = ["w1", "b1", "w2", "b2"]
    opt = libtrain.DistributedOptimizer(libtrain.SGD([params[n] for n in names], lr=args.lr, momentum=0.9))
    if args.checkpoint:
        libtrain.load_checkpoint(args.checkpoint, params)
    if rank == 0:
        print(f"training on {size} ranks ({libtrain.bootstrap_method()} bootstrap, "
              f"{libtrain.local_size()} on this node), {len(x)} samples, global batch {args.batch}",
              flush=True)

    steps, begin, acc = len(x) // args.batch, time.time(), 0.0
    for epoch in range(args.epochs):
        perm = np.random.default_rng(epoch).permutation(len(x))  # same on every rank
        start = time.time()
        for step in range(steps):
            if rank == args.die_rank and epoch * steps + step == args.die_step:
                print(f"rank {rank}: killing myself (SIGKILL) at step {args.die_step}", flush=True)
                os.kill(os.getpid(), 9)
            mine = perm[step * args.batch:(step + 1) * args.batch][rank::size]
            grads = forward_backward(params, floats(x[mine]), y[mine], scale=size / args.batch)
            opt.step(grads)  # average over ranks = gradient of the global batch
        if rank == 0:  # the others go on to the next allreduce and wait there
            acc = accuracy(params, xt, yt)
            print(f"epoch {epoch + 1}: test accuracy {acc:.4f} ({time.time() - start:.1f} s)", flush=True)
        if args.checkpoint:
            libtrain.save_checkpoint(args.checkpoint, params)
    libtrain.barrier()
    if rank == 0:
        print(f"final test accuracy {acc:.4f} after {args.epochs} epochs on {size} ranks "
              f"({time.time() - begin:.1f} s)", flush=True)
    libtrain.shutdown()


def main():
    args = parse_args()
    try:
        train(args)
    except libtrain.Error as e:
        rank = libtrain.rank() if libtrain.is_initialized() else "?"
        print(f"train.py: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
