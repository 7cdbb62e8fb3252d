"""Model- and object-level helpers of libtrain.torch, as horovod.torch has them:
broadcast_parameters, broadcast_optimizer_state, broadcast_object and allgather_object.
Objects travel pickled, as uint8 tensors."""
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


def _to_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    return buf.getvalue()


def _from_bytes(data):
    # Stopgap until the torch-py fix (issue 26): PyTorch 2.6 made weights_only=True the default.
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns root_rank's `obj` (anything torch.save can pickle) on every rank."""
    _ops._no_process_set(process_set)
    name = name or "broadcast_object"
    me = _ops._world().rank
    payload = torch.frombuffer(bytearray(_to_bytes(obj)), dtype=torch.uint8) if me == root_rank else None
    length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64)
    _ops.broadcast_(length, root_rank, name=name + ".size")
    if payload is None:
        payload = torch.empty(int(length), dtype=torch.uint8)
    _ops.broadcast_(payload, root_rank, name=name)
    return obj if me == root_rank else _from_bytes(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    """Every rank's `obj`, as a list in rank order."""
    _ops._no_process_set(process_set)
    name = name or "allgather_object"
    data = torch.frombuffer(bytearray(_to_bytes(obj)), dtype=torch.uint8)
    sizes = _ops.allgather(torch.tensor([data.numel()], dtype=torch.int64), name=name + ".sizes").tolist()
    gathered = _ops.allgather(data, name=name)
    out, offset = [], 0
    for n in sizes:
        out.append(_from_bytes(gathered[offset:offset + n].numpy().tobytes()))
        offset += n
    return out


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Makes every rank's optimizer state (momentum buffers, step counts) and hyper-parameters
    (param_groups: lr, momentum, ...) root_rank's. The state travels as one pickled object,
    so this is for setup and checkpoint restores, not for every step."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("libtrain.torch: cannot broadcast the state of torch.optim.LBFGS")
    state = broadcast_object(optimizer.state_dict(), root_rank, name="broadcast_optimizer_state")
    if _ops._world().rank != root_rank:
        optimizer.load_state_dict(state)
