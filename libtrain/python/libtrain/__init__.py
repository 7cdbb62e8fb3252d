# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""libtrain: Horovod-style data-parallel training for numpy models (and anything with buffers).

    import libtrain
    libtrain.init()                          # PMIx under srun, RANK/WORLD_SIZE, or 1 process
    libtrain.broadcast_parameters(params)    # everyone starts from rank 0's weights
    opt = libtrain.DistributedOptimizer(libtrain.SGD(params, lr=libtrain.scaled_lr(0.1, ...)))
    opt.step(grads)                          # averages grads (fused, async) then updates

Collectives raise libtrain.PeerError / TimeoutError / MismatchError instead of hanging.
"""
import os

import numpy as np

from ._libtrain import (Error, Handle, InvalidArgument, MismatchError, PeerError, TimeoutError,
                        GradientReducer, allgather, allreduce_, allreduce_async_, barrier,
                        bootstrap_method, broadcast_, check_build, init, is_initialized,
                        local_rank, local_size, rank, scaled_learning_rate, shutdown, size)

__all__ = ["init", "shutdown", "rank", "size", "local_rank", "local_size", "allreduce",
           "allreduce_", "allreduce_async_", "broadcast", "broadcast_", "allgather", "barrier",
           "broadcast_parameters", "DistributedOptimizer", "SGD", "scaled_lr", "save_checkpoint",
           "load_checkpoint", "check_build", "Error", "PeerError", "TimeoutError", "MismatchError"]


def allreduce(array, op="average", dtype=""):
    """Returns a reduced copy of `array` (op: average, sum, min, max)."""
    out = np.array(array, copy=True, order="C")
    allreduce_(out, op, dtype)
    return out


def broadcast(array, root=0, dtype=""):
    """Returns a copy of root's `array` on every rank."""
    out = np.array(array, copy=True, order="C")
    broadcast_(out, root, dtype)
    return out


def _arrays(params):
    return list(params.values()) if isinstance(params, dict) else list(params)


def broadcast_parameters(params, root=0):
    """Overwrites every array in `params` (list or dict) in place with root's values."""
    for a in _arrays(params):
        broadcast_(a, root)


def scaled_lr(base_lr, epoch=None, warmup_epochs=5.0):
    """base_lr * size() after `warmup_epochs`, ramping linearly from base_lr (Goyal et al.)."""
    if epoch is None:
        epoch = warmup_epochs
    return scaled_learning_rate(base_lr, size(), epoch, warmup_epochs)


class SGD:
    """Plain SGD with momentum on numpy arrays, updated in place."""

    def __init__(self, params, lr=0.01, momentum=0.0):
        self.params, self.lr, self.momentum = _arrays(params), lr, momentum
        self._velocity = [np.zeros_like(p) for p in self.params]

    def step(self, grads):
        for p, g, v in zip(self.params, grads, self._velocity):
            if self.momentum:
                v *= self.momentum
                v += g
                g = v
            p -= self.lr * g


class DistributedOptimizer:
    """Wraps an optimizer with step(grads): averages the gradient arrays over all ranks first,
    packed into fusion buffers (fusion_bytes, default LIBTRAIN_FUSION_BYTES or 64 MiB) whose
    allreduces run in the background while the next bucket is packed."""

    def __init__(self, optimizer, fusion_bytes=0, op="average"):
        self.optimizer = optimizer
        self._reducer = GradientReducer(fusion_bytes, op)

    def reduce(self, grads):
        grads = [g if g.flags.c_contiguous and g.flags.writeable else np.ascontiguousarray(g) for g in grads]
        self._reducer.reduce(grads)
        return grads

    def step(self, grads):
        return self.optimizer.step(self.reduce(list(grads)))

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


def save_checkpoint(path, arrays):
    """Rank 0 writes `arrays` (dict name -> array) to `path` (.npz) atomically; all ranks wait."""
    if rank() == 0:
        tmp = f"{path}.tmp.{os.getpid()}.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    barrier()


def load_checkpoint(path, arrays):
    """Fills `arrays` (dict name -> array) from rank 0's `path`; returns False if it is absent."""
    flag = np.array([1 if rank() == 0 and os.path.exists(path) else 0], dtype=np.int32)
    broadcast_(flag, 0)
    if not flag[0]:
        return False
    if rank() == 0:
        with np.load(path) as data:
            for name, a in arrays.items():
                a[...] = data[name]
    broadcast_parameters(arrays, 0)
    return True
