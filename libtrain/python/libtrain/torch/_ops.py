# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Tensor collectives of libtrain.torch, as Horovod's horovod.torch has them: allreduce,
broadcast, allgather (first dimensions may differ), alltoall, their in-place and async forms with
integer handles, synchronize/poll, barrier and join.

A contiguous CPU tensor is handed to libtrain where it lies (its data pointer): the in-place forms
copy nothing. A non-contiguous tensor goes through a contiguous copy. CUDA tensors go through
libtrain's NCCL communicator when the build has one.
"""
import itertools
import os
import threading
import time

import torch

from .. import _libtrain
from .._libtrain import Communicator, MismatchError

# Reduction operators (Horovod's names). Horovod's Adasum and Product have no libtrain kernel.
Average = "average"
Sum = "sum"
Min = "min"
Max = "max"
Adasum = "adasum"
Product = "product"

_DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8",
}


def _world():
    return Communicator.world()


def note_compute_threads():
    """Tells the communicators about to be formed how many threads torch computes with
    (LIBTRAIN_COMPUTE_THREADS, unless set): where the node's ranks with their threads outnumber
    its CPUs, libtrain's waiters then yield instead of spinning on a compute thread's CPU."""
    os.environ.setdefault("LIBTRAIN_COMPUTE_THREADS", str(torch.get_num_threads()))


def dtype_name(tensor):
    """libtrain's name of `tensor`'s dtype; ValueError for the ones it cannot reduce."""
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        raise ValueError(f"libtrain.torch: tensors of dtype {tensor.dtype} are not supported; use "
                         "float32/64/16, bfloat16, int32/64 or uint8") from None


def resolve_op(average=None, op=None):
    """Horovod's rule: `average` (deprecated) and `op` are exclusive; the default is Average."""
    if average is not None and op is not None:
        raise ValueError("libtrain.torch: give either op= or average=, not both")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise NotImplementedError("libtrain.torch: op=Adasum is not implemented; use Average or Sum")
    if op == Product:
        raise NotImplementedError("libtrain.torch: op=Product is not implemented; use Sum, Min or Max")
    if op not in (Average, Sum, Min, Max):
        raise ValueError(f"libtrain.torch: unknown reduction op {op!r}")
    return op


def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"libtrain.torch: {what} takes a torch.Tensor, not {type(tensor).__name__}")
    if tensor.is_sparse:
        raise ValueError(f"libtrain.torch: {what} of a sparse tensor is not supported; use to_dense()")
    dtype_name(tensor)


class _Done:
    """A finished collective (the CUDA path completes before it returns)."""

    def wait(self):
        pass

    def is_done(self):
        return True


def _nccl():
    if not _libtrain.nccl_available():
        raise RuntimeError("libtrain.torch: this libtrain was built without NCCL, so CUDA tensors "
                           "cannot be reduced; move them to the CPU or rebuild libtrain with CUDA")
    return _libtrain.NcclCommunicator.world()


def _cuda_collective(fn, tensor, *args):
    torch.cuda.current_stream(tensor.device).synchronize()  # the tensor's producers are done
    nccl = _nccl()
    fn(nccl, *args)
    nccl.synchronize()
    return _Done()


def start_allreduce(buf, op, name, comm=None):
    """Starts an in-place allreduce of the contiguous tensor `buf`; returns its completion."""
    if buf.is_cuda:
        return _cuda_collective(lambda c: c.allreduce(buf.data_ptr(), buf.numel(), dtype_name(buf), op), buf)
    return (comm or _world()).allreduce(buf, buf.data_ptr(), buf.numel(), dtype_name(buf), op, name or "")


def start_broadcast(buf, root, name, comm=None):
    if buf.is_cuda:
        return _cuda_collective(lambda c: c.broadcast(buf.data_ptr(), buf.numel(), dtype_name(buf), root), buf)
    return (comm or _world()).broadcast(buf, buf.data_ptr(), buf.numel(), dtype_name(buf), root, name or "")


def start_allgather(src, out, name, comm=None):
    """out holds size() * src.numel() elements: rank r's src at r * src.numel()."""
    if src.is_cuda:
        return _cuda_collective(
            lambda c: c.allgather(src.data_ptr(), out.data_ptr(), src.numel(), dtype_name(src)), src)
    return (comm or _world()).allgather((src, out), src.data_ptr(), out.data_ptr(), src.numel(),
                                        dtype_name(src), name or "")


# ---- handles -------------------------------------------------------------------------------

class _Pending:
    __slots__ = ("works", "finish", "result")

    def __init__(self, works, finish):
        self.works, self.finish, self.result = works, finish, None


_handles = {}
_handles_lock = threading.Lock()
_next_handle = itertools.count(1)


def _register(works, finish):
    h = next(_next_handle)
    with _handles_lock:
        _handles[h] = _Pending(works, finish)
    return h


def poll(handle):
    """True when the collective behind `handle` has finished (synchronize() will not block)."""
    with _handles_lock:
        pending = _handles.get(handle)
    if pending is None:
        raise ValueError(f"libtrain.torch: handle {handle} is unknown or already synchronized")
    return all(w.is_done() for w in pending.works)


def synchronize(handle):
    """Waits for the collective behind `handle` and returns its output tensor; raises its error."""
    with _handles_lock:
        pending = _handles.pop(handle, None)
    if pending is None:
        raise ValueError(f"libtrain.torch: handle {handle} is unknown or already synchronized")
    for w in pending.works:
        w.wait()
    return pending.finish()


# ---- allreduce -----------------------------------------------------------------------------

def _scale(tensor, factor):
    if factor != 1.0:
        if not tensor.is_floating_point():
            raise ValueError("libtrain.torch: prescale/postscale factors need a floating-point tensor")
        tensor.mul_(factor)


def _allreduce_start(tensor, out, op, name, prescale_factor, postscale_factor, comm=None):
    """Reduces `tensor` into `out` (which may be `tensor`); returns ([work], finish())."""
    op = resolve_op(op=op)
    _check_tensor(tensor, "allreduce")
    buf = out if out.is_contiguous() else out.contiguous()
    if buf is not tensor and buf.data_ptr() != tensor.data_ptr():
        buf.copy_(tensor)
    _scale(buf, prescale_factor)
    work = start_allreduce(buf, op, name, comm)

    def finish():
        _scale(buf, postscale_factor)
        if buf is not out:
            out.copy_(buf)
        return out

    return [work], finish


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    """Starts reducing `tensor` in place over all ranks; returns a handle for synchronize()."""
    _no_process_set(process_set)
    works, finish = _allreduce_start(tensor, tensor, resolve_op(average, op), name,
                                     prescale_factor, postscale_factor)
    return _register(works, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    """Starts reducing a copy of `tensor`; synchronize(handle) returns the reduced copy."""
    _no_process_set(process_set)
    _check_tensor(tensor, "allreduce")
    out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    works, finish = _allreduce_start(tensor, out, resolve_op(average, op), name,
                                     prescale_factor, postscale_factor)
    return _register(works, finish)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    """Reduces `tensor` in place over all ranks (op: Average by default, Sum, Min, Max)."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """Returns the reduction of `tensor` over all ranks; `tensor` is left as it is. Gradients
    flow back through it (the gradient of an average is averaged the same way)."""
    from ._compression import Compression
    compression = compression or Compression.none
    op = resolve_op(average, op)
    if tensor.requires_grad and torch.is_grad_enabled():
        return _AllreduceFn.apply(tensor, op, name, compression, prescale_factor, postscale_factor)
    compressed, ctx = compression.compress(tensor)
    reduced = synchronize(allreduce_async(compressed, None, name, op, prescale_factor, postscale_factor,
                                          process_set))
    return compression.decompress(reduced, ctx)


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, compression, prescale, postscale):
        ctx.op, ctx.name, ctx.scale = op, name, (prescale, postscale)
        compressed, cctx = compression.compress(tensor.detach())
        out = synchronize(allreduce_async(compressed, None, name, op, prescale, postscale))
        return compression.decompress(out, cctx)

    @staticmethod
    def backward(ctx, grad):
        prescale, postscale = ctx.scale
        reduced = synchronize(allreduce_async(grad.contiguous(), None, ctx.name and ctx.name + ".grad",
                                              ctx.op, prescale, postscale))
        return reduced, None, None, None, None, None


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None):
    """allreduce of each tensor of a list, all in flight together."""
    handles = [allreduce_async(t, average, name and f"{name}.{i}", op, prescale_factor, postscale_factor,
                               process_set) for i, t in enumerate(tensors)]
    return [synchronize(h) for h in handles]


# ---- broadcast -----------------------------------------------------------------------------

def _check_root(root_rank, comm=None):
    n = (comm or _world()).size
    if not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError(f"libtrain.torch: root_rank {root_rank!r} is not a rank (0..{n - 1})")


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """Starts overwriting `tensor` with root_rank's; returns a handle for synchronize()."""
    _no_process_set(process_set)
    _check_tensor(tensor, "broadcast")
    _check_root(root_rank)
    buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    work = start_broadcast(buf, root_rank, name)

    def finish():
        if buf is not tensor:
            tensor.copy_(buf)
        return tensor

    return _register([work], finish)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    """Starts broadcasting into a copy of `tensor`; synchronize(handle) returns it."""
    _check_tensor(tensor, "broadcast")
    return broadcast_async_(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank,
                            name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Overwrites `tensor` in place with root_rank's values."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Returns root_rank's `tensor` on every rank; `tensor` itself is left as it is."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


# ---- allgather -----------------------------------------------------------------------------

def _gather_shapes(tensor, name):
    """Every rank's shape, as a list; MismatchError on every rank when they cannot be concatenated."""
    ndim = tensor.dim()
    mine = torch.tensor([ndim] + list(tensor.shape) + [0] * (8 - ndim), dtype=torch.int64)
    if ndim > 7:
        raise ValueError("libtrain.torch: allgather of tensors with more than 7 dimensions")
    everyone = torch.empty(_world().size * 9, dtype=torch.int64)
    start_allgather(mine, everyone, (name or "allgather") + ".shapes").wait()
    rows = everyone.view(-1, 9).tolist()
    shapes = [tuple(row[1:1 + row[0]]) for row in rows]
    trailing = {s[1:] for s in shapes}
    dims = {len(s) for s in shapes}
    if len(trailing) > 1 or len(dims) > 1 or 0 in dims:
        raise MismatchError(f"libtrain: allgather '{name or 'allgather'}': ranks gave shapes {shapes}; "
                            "all but the first dimension must agree (and none may be a scalar)")
    return shapes


def _allgather_start(tensor, name):
    """Starts an allgather; returns ([work], finish(), every rank's first dimension)."""
    _check_tensor(tensor, "allgather")
    src = tensor.detach().contiguous()
    shapes = _gather_shapes(src, name)
    rest = tuple(src.shape[1:])
    firsts = [s[0] for s in shapes]
    biggest = max(firsts)
    if min(firsts) == biggest:
        out = src.new_empty((biggest * len(shapes),) + rest)
        return [start_allgather(src, out, name)], lambda: out, firsts
    padded = src.new_zeros((biggest,) + rest)
    padded[:src.shape[0]].copy_(src)
    staged = src.new_empty((biggest * len(shapes),) + rest)
    work = start_allgather(padded, staged, name)

    def finish():
        return torch.cat([staged[r * biggest:r * biggest + n] for r, n in enumerate(firsts)], dim=0)

    return [work], finish, firsts


def allgather_async(tensor, name=None, process_set=None):
    """Starts gathering every rank's `tensor` along the first dimension (its size may differ
    between ranks); synchronize(handle) returns the concatenation in rank order."""
    _no_process_set(process_set)
    works, finish, _ = _allgather_start(tensor, name)
    return _register(works, finish)


def allgather(tensor, name=None, process_set=None):
    """Every rank's `tensor` concatenated along the first dimension, in rank order. Gradients
    flow back: each rank gets the sum over ranks of the gradient of its own rows."""
    _no_process_set(process_set)
    if tensor.requires_grad and torch.is_grad_enabled():
        return _AllgatherFn.apply(tensor, name)
    return synchronize(allgather_async(tensor, name))


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        works, finish, firsts = _allgather_start(tensor, name)
        for w in works:
            w.wait()
        me = _world().rank
        ctx.rows = (sum(firsts[:me]), firsts[me])
        return finish()

    @staticmethod
    def backward(ctx, grad):
        summed = synchronize(allreduce_async(grad.contiguous(), op=Sum))
        start, count = ctx.rows
        return summed[start:start + count], None


# ---- alltoall ------------------------------------------------------------------------------

def alltoall(tensor, splits=None, name=None, process_set=None):
    """Rank r sends rows splits[k] of `tensor` to rank k (equal splits when None) and returns the
    rows it received, in rank order; with `splits`, also the received splits (Horovod >= 0.22).
    Built on allgather: every rank receives all the data, so use it for small tensors."""
    _no_process_set(process_set)
    _check_tensor(tensor, "alltoall")
    n, me = _world().size, _world().rank
    if splits is None:
        if tensor.shape[0] % n:
            raise ValueError(f"libtrain.torch: alltoall of {tensor.shape[0]} rows cannot be split "
                             f"evenly over {n} ranks; pass splits=")
        sizes = [tensor.shape[0] // n] * n
    else:
        sizes = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
        if len(sizes) != n or min(sizes) < 0 or sum(sizes) != tensor.shape[0]:
            raise ValueError(f"libtrain.torch: alltoall splits {sizes} must be {n} non-negative "
                             f"numbers summing to the {tensor.shape[0]} rows")
    all_splits = synchronize(allgather_async(torch.tensor([sizes], dtype=torch.int64),
                                             (name or "alltoall") + ".splits")).tolist()
    rows = synchronize(allgather_async(tensor.detach(), name))
    pieces, start = [], 0
    for sender in range(n):
        offset = start + sum(all_splits[sender][:me])
        pieces.append(rows[offset:offset + all_splits[sender][me]])
        start += sum(all_splits[sender])
    out = torch.cat(pieces, dim=0)
    if splits is None:
        return out
    return out, torch.tensor([all_splits[s][me] for s in range(n)], dtype=torch.int32)


# ---- barrier, join -------------------------------------------------------------------------

def barrier(process_set=None):
    """Returns when every rank has called barrier()."""
    _no_process_set(process_set)
    _world().barrier()


def join(device=-1):
    """Waits until every rank has called join(); returns the rank that joined last.
    Unlike Horovod, ranks that joined do not stand in for allreduces still running elsewhere:
    every rank must make the same collectives before it joins (see README, Horovod users)."""
    arrival = torch.tensor([time.time()], dtype=torch.float64)
    times = synchronize(allgather_async(arrival, "join"))
    return int(torch.argmax(times))


def _no_process_set(process_set):
    if process_set is not None and getattr(process_set, "process_set_id", 0) != 0:
        raise NotImplementedError("libtrain.torch: process sets other than the global one are not implemented")
