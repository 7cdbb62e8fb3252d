# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# What differs between the PyTorch versions libtrain.torch runs on (Debian 12's 1.13 to 2.x): every
# version-specific detail of the package lives here, found by probing for the feature rather than
# by comparing version numbers. The rest of libtrain.torch calls these and holds no such test.
import inspect
import os

import torch

try:
    import torch.distributed as dist
    AVAILABLE = dist.is_available()
except ImportError:  # a torch built without distributed support
    dist, AVAILABLE = None, False

# Devices whose tensors the backend takes: CPU tensors where they lie, CUDA tensors through CPU copies.
BACKEND_DEVICES = ["cpu", "cuda"]


def register_backend(name, creator):
    """Registers a torch.distributed backend. PyTorch >= 2.1 asks which devices it serves (and
    warns on every import when not told); 1.13 has no such argument."""
    kwargs = {}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kwargs["devices"] = BACKEND_DEVICES
    dist.Backend.register_backend(name, creator, **kwargs)


def default_pg_timeout():
    """c10d's default group timeout (a timeout= equal to it means the user gave none)."""
    import datetime
    return getattr(dist.distributed_c10d, "default_pg_timeout", datetime.timedelta(minutes=30))


def default_store():
    """The c10d store of the default group (a private function on every version so far)."""
    return dist.distributed_c10d._get_default_store()


def tcpstore_without_libuv():
    """PyTorch >= 2.4 builds env:// and tcp:// stores on libuv unless USE_LIBUV=0; a PyTorch
    built without libuv (Debian 13's 2.6) then fails every init_process_group() with "use_libuv
    was requested but PyTorch was build without libuv support". Where that is so and the user
    has not chosen, USE_LIBUV=0 (torch's own switch) picks the store server that is built in.
    Returns whether it set the variable."""
    if not AVAILABLE or "USE_LIBUV" in os.environ or not hasattr(dist, "TCPStore"):
        return False
    try:  # a throwaway server on a free port: raises at once where libuv is missing
        dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False, use_libuv=True)
    except TypeError:  # no use_libuv argument: a PyTorch before the libuv store
        return False
    except RuntimeError as e:
        if "libuv" not in str(e):
            return False
        os.environ["USE_LIBUV"] = "0"
        return True
    return False


def fix_torchrun():
    """What torchrun (torch.distributed.run) needs on the PyTorch builds we test, applied in its
    own process before it starts (python3 -m libtrain.torch.run). Returns the fixes applied."""
    applied = []
    if _std_from_str_fixed():
        applied.append("Std.from_str")
    if _tcpstore_follows_use_libuv():
        applied.append("TCPStore use_libuv")
    return applied


def _std_from_str_fixed():
    """PyTorch 1.13's torchrun parses --redirects/--tee by iterating over its IntFlag Std, which
    Python >= 3.11 iterates without the 0 and multi-bit members: from_str("0"), the default, is
    None and torchrun crashes before it starts a worker. Where that is so, from_str builds the
    flag from the number instead."""
    try:
        from torch.distributed.elastic.multiprocessing import api
    except ImportError:
        return False
    std = getattr(api, "Std", None)
    if std is None or std.from_str("0") is not None:
        return False
    import re
    original = std.from_str.__func__

    def from_str(cls, vm):
        if re.fullmatch(r"[0-3]", vm):
            return cls(int(vm))
        if re.fullmatch(r"\d+:[0-3](,\d+:[0-3])*", vm):
            return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
        return original(cls, vm)  # raises torch's own error for anything else
    std.from_str = classmethod(from_str)
    return True


def _tcpstore_follows_use_libuv():
    """torchrun's rendezvous (c10d and static) makes its TCPStore without use_libuv, which is
    True by default since PyTorch 2.4, so on a build without libuv (Debian's 2.6 and later)
    torchrun fails whatever USE_LIBUV says. Under USE_LIBUV=0 (which the import of
    libtrain.torch sets there), a TCPStore made without use_libuv gets use_libuv=False, as
    env:// stores do; every module of torch.distributed that holds the class gets the subclass.
    The workers' env:// rendezvous would connect to the agent's store with libuv too (a client
    made without use_libuv), in processes this one does not patch: torch's own
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 has worker rank 0 serve a store of its own instead,
    made as USE_LIBUV says."""
    if not AVAILABLE or os.environ.get("USE_LIBUV") != "0" or not hasattr(dist, "TCPStore"):
        return False
    base = dist.TCPStore
    if getattr(base, "_libtrain_use_libuv_default", False):
        return False
    try:
        base("127.0.0.1", 0, 1, True, wait_for_workers=False, use_libuv=False)
    except TypeError:  # no use_libuv argument: a PyTorch before the libuv store
        return False

    class TCPStore(base):
        _libtrain_use_libuv_default = True
        __doc__ = base.__doc__

        def __init__(self, *args, **kwargs):
            if len(args) < 9:  # use_libuv is the ninth parameter
                kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    import sys
    for name, module in list(sys.modules.items()):
        if (name == "torch.distributed" or name.startswith("torch.distributed.")) and \
                getattr(module, "TCPStore", None) is base:
            module.TCPStore = TCPStore
    return True


class GroupCompat:
    """What ProcessGroupLibtrain adds for PyTorch >= 2.0, whose c10d keeps a group's name in the
    C++ Backend objects it holds, and a group written in Python holds none (a C++ backend cannot
    be built here without torch's headers). From Python, the name answers as it was set
    (DeviceMesh, so FSDP2, looks it up), and the backend asked for by init_process_group(
    device_id=...) says it cannot split. C++ code that asks a group for a per-device backend
    itself still fails, with PyTorch's "No backend type associated with device type"; the
    functional collectives reach the Python methods through the coalesced forms."""
    _libtrain_name = _libtrain_desc = ""

    def _set_group_name(self, name):
        self._libtrain_name = name

    def _set_group_desc(self, desc):
        self._libtrain_desc = desc

    @property
    def group_name(self):
        return self._libtrain_name

    @property
    def group_desc(self):
        return self._libtrain_desc

    def _get_backend(self, device):
        return _Unsplittable()

    # Newer PyTorch (2.14) calls the single-tensor collectives by new names (all_gather_into_tensor
    # became all_gather_single, ...); the C++ defaults of those ask for a per-device backend.
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)


class _Unsplittable:
    """The per-device backend init_process_group(device_id=...) asks whether it can split."""
    supports_splitting = False


def run_eagerly(cls):
    """torch.compile of a DDP model traces into the group's collectives from DDP's forward, and
    PyTorch 2.14's dynamo then takes the group for an opaque C++ object whose Python members it
    refuses ("Member '_check_root' is not registered for this opaque object type"). Each method
    of `cls` runs eagerly instead (a graph break), as a C++ group's collectives do; PyTorch
    without torch.compiler (1.13) keeps them as they are."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None:
        return cls
    for name, member in list(vars(cls).items()):
        if inspect.isfunction(member) and not (name.startswith("__") and name.endswith("__")):
            setattr(cls, name, disable(member))
    return cls


run_eagerly(GroupCompat)
