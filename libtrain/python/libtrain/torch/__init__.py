# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""libtrain.torch: Horovod's PyTorch API on libtrain, and a torch.distributed backend.

A Horovod PyTorch script runs with its import line changed and no mpirun or horovodrun:

    import libtrain.torch as hvd          # was: import horovod.torch as hvd
    hvd.init()                            # PMIx under srun --mpi=pmix, else RANK/WORLD_SIZE, else 1 rank
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

and a DDP script changes its backend string (importing this module registers it):

    import libtrain.torch
    torch.distributed.init_process_group("libtrain")

Errors are exceptions on every rank (libtrain.PeerError, TimeoutError, MismatchError), never a
hang. Differences from Horovod are listed in README.md ("Training with PyTorch").
"""
from .. import _libtrain
from .._libtrain import (Error, InvalidArgument, MismatchError, PeerError, TimeoutError, Communicator,
                         init as _init, is_initialized, shutdown as _shutdown)
from ._compression import Compression
from ._functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                         broadcast_parameters)
from ._ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce,
                   allreduce_, allreduce_async, allreduce_async_, alltoall, barrier, broadcast, broadcast_,
                   broadcast_async, broadcast_async_, grouped_allreduce, join, poll, synchronize)
from ._optimizer import DistributedOptimizer
from ._sync_batch_norm import SyncBatchNorm
from . import _backend, _compat, _ops  # _backend registers torch.distributed backend "libtrain"

HorovodInternalError = Error


class ProcessSet:
    """Only the global process set exists (all ranks)."""
    process_set_id = 0

    def size(self):
        return size()

    def rank(self):
        return rank()


global_process_set = ProcessSet()


def init(comm=None, process_sets=None):
    """Joins the job: PMIx under srun --mpi=pmix, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
    otherwise (the plugin and `slipway run` set them), else a single rank. Idempotent.
    Without PMIx, after torch.distributed.init_process_group() the rendezvous goes through
    torch's store: its env:// server already holds MASTER_PORT."""
    if comm is not None or process_sets:
        raise NotImplementedError("libtrain.torch: init() takes no MPI communicator or process sets")
    if is_initialized():
        return
    _ops.note_compute_threads()
    shared = _torch_rendezvous()
    if shared is None:
        _init()
        return
    global _torch_worlds
    _torch_worlds += 1
    _libtrain.init_from_store(*shared, method="torch")  # keeps no reference to the store


# Worlds formed over torch's store so far: each init() after a shutdown() takes fresh keys (every
# rank counts the same), as the env bootstrap takes a fresh server.
_torch_worlds = 0


def _torch_rendezvous():
    """(store, rank, size) of torch.distributed's default group when init() should share it:
    no PMIx, RANK/WORLD_SIZE set, and the default group already formed over them."""
    if _libtrain.detect_bootstrap() != "env":
        return None
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return None
    store = dist.PrefixStore(f"libtrain/hvd/{_torch_worlds + 1}", _compat.default_store())
    return _backend._StoreAdapter(store), dist.get_rank(), dist.get_world_size()


def shutdown():
    """Waits for outstanding collectives and leaves the job; init() may be called again."""
    _shutdown()


def _world():
    return Communicator.world()


def size():
    return _world().size


def rank():
    return _world().rank


def local_size():
    return _world().local_size


def local_rank():
    return _world().local_rank


def cross_size():
    """Number of nodes (Horovod: processes that share this process's local rank)."""
    return _world().node_count


def cross_rank():
    """This node's index, 0..cross_size()-1."""
    return _world().node_index


def is_homogeneous():
    return size() == local_size() * cross_size()


def mpi_built():
    return False  # libtrain bootstraps from PMIx or the environment: no MPI inside


def mpi_enabled():
    return False


def mpi_threads_supported():
    raise ValueError("libtrain.torch: not built with MPI")


def gloo_built():
    return False  # the transports are libtrain's own shared memory and TCP rings


def gloo_enabled():
    return False


def nccl_built():
    return bool(_libtrain.nccl_available())


def cuda_built():
    return nccl_built()


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
    "cross_rank", "is_homogeneous", "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled",
    "nccl_built", "cuda_built", "Average", "Sum", "Min", "Max", "Adasum", "Product", "Compression",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce", "allgather",
    "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "alltoall",
    "synchronize", "poll", "barrier", "join", "broadcast_parameters", "broadcast_optimizer_state",
    "broadcast_object", "allgather_object", "DistributedOptimizer", "SyncBatchNorm", "Error",
    "PeerError", "TimeoutError", "MismatchError", "InvalidArgument", "global_process_set",
]
