# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Model- and object-level helpers of libtrain.torch, as horovod.torch has them:
broadcast_parameters, broadcast_optimizer_state, broadcast_object and allgather_object.
Objects travel pickled, as uint8 tensors; tensors inside them as raw bytes beside the pickle."""
import io
import pickle

import torch

from . import _ops


def _named_tensors(params):
    """(name, tensor) pairs in an order every rank agrees on."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
        if items and not isinstance(items[0], tuple):
            items = [(f"param.{i}", p) for i, p in enumerate(items)]
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"libtrain.torch: broadcast_parameters: '{name}' is a "
                             f"{type(p).__name__}, not a tensor")
    return items


def broadcast_parameters(params, root_rank=0):
    """Overwrites, in place, every tensor of `params` (a state_dict, model.named_parameters(), or
    a list of tensors) with root_rank's values. All broadcasts are in flight together."""
    handles = []
    with torch.no_grad():
        for name, p in _named_tensors(params):
            handles.append(_ops.broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                                 name=f"broadcast.{name}"))
        for h in handles:
            _ops.synchronize(h)


# Beyond Python's atomic types (pickle writes those without naming a class): what a plain stream,
# one of containers, scalars and tensors only, may name.
_PLAIN_CLASSES = {("builtins", n) for n in ("complex", "set", "frozenset", "bytearray", "slice", "range")}
_PLAIN_CLASSES.add(("collections", "OrderedDict"))


class _Pickler(pickle.Pickler):
    """Pickles tensors as (dtype, shape, raw bytes) beside the stream (persistent ids), not with
    torch's own reduction, whose unpickling goes through torch.load. `foreign` is the first object
    that made the stream name a class or function beyond _PLAIN_CLASSES (None if none did)."""
    foreign = None

    def reducer_override(self, obj):  # called for every object but atomic ones and tensors
        kind = obj if isinstance(obj, type) else type(obj)
        if self.foreign is None and (kind.__module__, kind.__qualname__) not in _PLAIN_CLASSES:
            self.foreign = obj
        return NotImplemented  # pickled as pickle would

    def persistent_id(self, obj):
        if not isinstance(obj, torch.Tensor) or obj.layout != torch.strided or obj.is_quantized:
            return None  # other objects, and the rare sparse/quantized tensor, pickle as they do
        t = obj.detach().to("cpu").contiguous().reshape(-1)
        data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        kind = "parameter" if isinstance(obj, torch.nn.Parameter) else "tensor"
        return (kind, str(obj.dtype).split(".")[-1], tuple(obj.shape), data, obj.requires_grad)


class _Unpickler(pickle.Unpickler):
    """The counterpart of _Pickler. With `plain`, the stream may hold only tensors and Python's
    own containers and scalars: naming any other class or function (what lets a pickle run code)
    is refused."""
    def __init__(self, data, plain):
        super().__init__(io.BytesIO(data))
        self._plain = plain

    def persistent_load(self, pid):
        kind, dtype_name, shape, data, requires_grad = pid
        dtype = getattr(torch, dtype_name, None)
        if kind not in ("tensor", "parameter") or not isinstance(dtype, torch.dtype):
            raise pickle.UnpicklingError(f"libtrain.torch: unknown tensor record {kind!r}/{dtype_name!r}")
        t = torch.empty(shape, dtype=dtype)
        if t.numel():
            t.reshape(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        if kind == "parameter":
            return torch.nn.Parameter(t, requires_grad=requires_grad)
        return t.requires_grad_(requires_grad) if requires_grad else t

    def find_class(self, module, name):
        if self._plain and (module, name) not in _PLAIN_CLASSES:
            raise pickle.UnpicklingError(f"libtrain.torch: the object received names {module}.{name}; "
                                         "only tensors and plain Python data are accepted here")
        return super().find_class(module, name)


def _to_bytes(obj):
    """(the pickled bytes, the first object that needs an unrestricted unpickler or None)"""
    buf = io.BytesIO()
    pickler = _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dump(obj)
    return buf.getvalue(), pickler.foreign


def _from_bytes(data, plain=False):
    return _Unpickler(data, plain).load()


def _broadcast_bytes(data, error, root_rank, name):
    """root_rank's `data` (bytes) on every rank; if the root gives an `error` text instead, every
    rank raises ValueError with it."""
    me = _ops._world().rank
    header = torch.zeros(2, dtype=torch.int64)  # [is error, length]
    if me == root_rank:
        payload = error.encode() if error else data
        header[0], header[1] = int(bool(error)), len(payload)
    _ops.broadcast_(header, root_rank, name=name + ".size")
    failed, length = bool(header[0]), int(header[1])
    buf = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if me == root_rank and length else \
        torch.empty(length, dtype=torch.uint8)
    _ops.broadcast_(buf, root_rank, name=name)
    if failed:
        raise ValueError(buf.numpy().tobytes().decode(errors="replace"))
    return data if me == root_rank else buf.numpy().tobytes()


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns root_rank's `obj` on every rank: anything pickle can pickle, unpickled as Horovod's
    broadcast_object does (so for the job's own ranks, which trust each other). Tensors inside
    travel as raw bytes and arrive on the CPU."""
    _ops._no_process_set(process_set)
    me = _ops._world().rank
    data = _to_bytes(obj)[0] if me == root_rank else None
    data = _broadcast_bytes(data, None, root_rank, name or "broadcast_object")
    return obj if me == root_rank else _from_bytes(data)


def allgather_object(obj, name=None, process_set=None):
    """Every rank's `obj`, as a list in rank order (pickled as in broadcast_object)."""
    _ops._no_process_set(process_set)
    name = name or "allgather_object"
    data = torch.frombuffer(bytearray(_to_bytes(obj)[0]), dtype=torch.uint8)
    sizes = _ops.allgather(torch.tensor([data.numel()], dtype=torch.int64), name=name + ".sizes").tolist()
    gathered = _ops.allgather(data, name=name)
    out, offset = [], 0
    for n in sizes:
        out.append(_from_bytes(gathered[offset:offset + n].numpy().tobytes()))
        offset += n
    return out


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Makes every rank's optimizer state (momentum buffers, step counts) and hyper-parameters
    (param_groups: lr, momentum, ...) root_rank's. The state travels as tensors and a plain
    structure of Python containers and scalars: the receiving ranks unpickle nothing else, so
    a state that holds other objects raises ValueError on every rank. For setup and checkpoint
    restores, not for every step."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("libtrain.torch: cannot broadcast the state of torch.optim.LBFGS")
    me, data, error = _ops._world().rank, None, None
    if me == root_rank:
        data, foreign = _to_bytes(optimizer.state_dict())
        if foreign is not None:
            kind = foreign if isinstance(foreign, type) else type(foreign)
            error = (f"libtrain.torch: broadcast_optimizer_state: rank {root_rank}'s optimizer state "
                     f"holds a {kind.__module__}.{kind.__qualname__}, and only tensors and Python's own "
                     "containers and scalars are sent; broadcast it with broadcast_object")
    data = _broadcast_bytes(data, error, root_rank, "broadcast_optimizer_state")
    if me != root_rank:
        optimizer.load_state_dict(_from_bytes(data, plain=True))
