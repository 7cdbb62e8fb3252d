# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The torch.distributed backend "libtrain": importing libtrain.torch registers it, and then
# init_process_group("libtrain") (env://, tcp://, file:// or a store, as for Gloo) gives DDP and the
# direct collectives (all_reduce, broadcast, all_gather, reduce_scatter, barrier, reduce, gather,
# scatter, all_to_all) on a libtrain Communicator built over the store c10d hands the backend;
# send/recv (isend, irecv, batch_isend_irecv) pass their bytes through that store.
# Differences from Gloo are listed in README.md ("Training with PyTorch").
import collections
import datetime
import os
import queue
import threading
import time
import weakref

import torch

from .. import _libtrain
from . import _compat, _ops
from ._compat import AVAILABLE as _AVAILABLE, dist

BACKEND_NAME = "libtrain"

# torch dtypes libtrain reduces natively; uint8/int8/int16/bool are reduced as int32 copies.
_REDUCIBLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64}
_WIDENED = {torch.uint8, torch.int8, torch.int16, torch.bool}

# A C++ caller (DDP's reducer, _broadcast_coalesced) holds our works through c10d's pybind
# trampoline, which finds the Python methods only while the Python object lives: completed works
# stay referenced for this many further completions (C++ waits on them at once in practice).
_KEEP_COMPLETED = 64
# How long stop() waits for a group's thread to finish its last work (a stuck collective ends
# within LIBTRAIN_TIMEOUT anyway; exiting is not held up longer than this).
_STOP_WAIT_S = 10.0


class _StoreAdapter:
    """A c10d Store seen as the key-value store libtrain's Communicator takes."""

    def __init__(self, store):
        self._store = store

    def set(self, key, value):
        self._store.set(key, value)

    def get(self, key, timeout_seconds):
        self._store.wait([key], datetime.timedelta(seconds=timeout_seconds))  # raises on timeout
        return self._store.get(key)

    def add(self, key, delta):
        return self._store.add(key, delta)


def _reduce_op(opts):
    """libtrain's name for the ReduceOp in `opts` (an options object, a ReduceOp or None)."""
    op = getattr(opts, "reduceOp", opts)
    if op is None:
        return "sum"
    supported = [("SUM", "sum"), ("MIN", "min"), ("MAX", "max"), ("AVG", "average")]
    for attr, name in supported:
        if hasattr(dist.ReduceOp, attr) and op == getattr(dist.ReduceOp, attr):
            return name
    label = next((a for a in ("PRODUCT", "BAND", "BOR", "BXOR", "PREMUL_SUM")
                  if hasattr(dist.ReduceOp, a) and op == getattr(dist.ReduceOp, a)), str(op))
    raise ValueError(f"libtrain backend: ReduceOp.{label} is not supported; use SUM, AVG, MIN or MAX")


def _tensor(t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"libtrain backend: {what} takes tensors, not {type(t).__name__}")
    if t.is_sparse:
        raise ValueError(f"libtrain backend: {what} of a sparse tensor is not supported; use to_dense()")
    return t


def _one(tensors, what):
    """The single tensor of a per-process tensor list (c10d's multi-device forms are not supported)."""
    if isinstance(tensors, torch.Tensor):
        return _tensor(tensors, what)
    if len(tensors) != 1:
        raise ValueError(f"libtrain backend: {what} takes one tensor per process, got {len(tensors)} "
                         "(the multi-device *_multigpu forms are not supported)")
    return _tensor(tensors[0], what)


class _Buf:
    """A contiguous CPU tensor libtrain can take in place of a user tensor: the tensor itself
    when it is one already, else a staging copy that copy_back() writes back."""
    __slots__ = ("user", "buf", "dtype", "count")

    def __init__(self, user, reduce=False, copy_in=True, private=False):
        self.user = user
        if reduce and user.dtype in _WIDENED:
            work_dtype = torch.int32
        elif reduce and user.dtype not in _REDUCIBLE:
            raise TypeError(f"libtrain backend: tensors of dtype {user.dtype} cannot be reduced; use "
                            "a floating-point or integer dtype")
        else:
            work_dtype = user.dtype
        if (not private and work_dtype == user.dtype and user.device.type == "cpu"
                and user.is_contiguous()):
            self.buf = user
        else:
            self.buf = torch.empty(user.shape, dtype=work_dtype, device="cpu")
            if copy_in:
                self.buf.copy_(user)
        # Data movement works on any dtype as bytes; reductions need libtrain's element type.
        name = _ops._DTYPES.get(self.buf.dtype)
        if name is None:
            self.dtype, self.count = "uint8", self.buf.numel() * self.buf.element_size()
        else:
            self.dtype, self.count = name, self.buf.numel()

    @property
    def addr(self):
        return self.buf.data_ptr()

    def copy_back(self):
        if self.buf is not self.user:
            self.user.copy_(self.buf)


def _future_value(fut):
    return fut.value()  # raises the collective's error


class _Work(dist.Work if _AVAILABLE else object):
    """A collective in flight: libtrain handles, then a finish step (copies out of staging
    buffers); completed by the group's completion thread, and get_future() then by a runner."""

    def __init__(self, handles, finish, result):
        super().__init__()
        self._handles, self._finish, self._result = handles, finish, result
        # get_future() is a child of the future we complete: a Python exception set on a future
        # is only a result to C++ (DDP's reducer would take it for its tensors), while one
        # raised in a then() callback makes the child a C++ error (RuntimeError with the message).
        self._raw = torch.futures.Future()
        self._future = self._raw.then(_future_value)
        self._done = threading.Event()
        self._error = None

    def _complete(self):
        try:
            for h in self._handles:
                h.wait()
            if self._finish is not None:
                self._finish()
        except Exception as e:  # libtrain.Error and whatever a finish step raises
            self._error = e
        self._handles = self._finish = None
        self._done.set()

    def _resolve(self):
        """Completes the future, which runs its then() callbacks in this thread."""
        if self._error is None:
            self._raw.set_result(self._result)
        else:
            self._raw.set_exception(self._error)

    def wait(self, timeout=None):
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        if not self._done.wait(seconds if seconds and seconds > 0 else None):
            raise _libtrain.TimeoutError(f"libtrain backend: the collective did not finish within "
                                         f"{seconds} s (Work.wait timeout)")
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._result

    def synchronize(self):
        pass  # CPU collectives: nothing to order with a device stream

    def source_rank(self):
        raise RuntimeError("libtrain backend: source_rank() is only defined for recv from any source, "
                           "which this backend does not implement")

    def get_future(self):
        return self._future


class _Runners:
    """Threads that complete works' futures. A future runs its then() callbacks in the thread
    that completes it, and a callback may wait for a later collective (PowerSGD's hook does):
    a new runner starts whenever every one is busy, so that later one is never queued behind it."""

    def __init__(self, label):
        self._label, self._queue, self._lock = label, queue.SimpleQueue(), threading.Lock()
        self._idle, self._threads = 0, []

    def submit(self, fn):
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                t = threading.Thread(target=self._run, daemon=True,
                                     name=f"libtrain-c10d-{self._label}-future{len(self._threads)}")
                self._threads.append(t)
                t.start()
        self._queue.put(fn)

    def _run(self):
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            fn()
            fn = None
            with self._lock:
                self._idle += 1

    def stop(self):
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=_STOP_WAIT_S)


class _Completer:
    """One daemon thread per group: waits for works in issue order (libtrain runs a group's
    collectives in that order) and completes them, errors included; their futures go to runners."""

    def __init__(self, label):
        self._queue = queue.SimpleQueue()
        self._recent = collections.deque(maxlen=_KEEP_COMPLETED)
        self._runners = _Runners(label)
        self._thread = threading.Thread(target=self._run, name=f"libtrain-c10d-{label}", daemon=True)
        self._thread.start()

    def submit(self, work):
        self._queue.put(work)

    def stop(self):
        """Ends the thread and waits for it: at interpreter exit (weakref.finalize runs this from
        atexit) a daemon thread still freeing tensors would be killed inside torch's C++
        deallocator, and the process would abort ("terminate called without an active
        exception") after a job that succeeded."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=_STOP_WAIT_S)
        self._runners.stop()

    def _run(self):
        while True:
            work = self._queue.get()
            if work is None:
                return
            work._complete()
            self._runners.submit(work._resolve)
            self._recent.append(work)
            work = None


def _make_communicator(store, rank, size, timeout):
    """A Communicator over the group's (already group-prefixed) c10d store. LIBTRAIN_TIMEOUT wins;
    else a timeout= other than c10d's default becomes libtrain's timeout, as it is Gloo's."""
    default = _compat.default_pg_timeout()
    seconds = 0.0
    if (not os.environ.get("LIBTRAIN_TIMEOUT") and isinstance(timeout, datetime.timedelta)
            and timeout != default and timeout.total_seconds() > 0):
        seconds = timeout.total_seconds()
    _ops.note_compute_threads()
    return _libtrain.Communicator(_StoreAdapter(store), rank, size, prefix="libtrain/c10d",
                                  timeout_seconds=seconds)


def _p2p_timeout(timeout):
    """Seconds a recv waits for its message: LIBTRAIN_TIMEOUT, else a timeout= other than c10d's
    default, else libtrain's default (300 s), as the collectives."""
    env = os.environ.get("LIBTRAIN_TIMEOUT")
    if env:
        try:
            return max(float(env), 0.001)
        except ValueError:
            pass  # the Communicator has refused it already
    if (isinstance(timeout, datetime.timedelta) and timeout != _compat.default_pg_timeout()
            and timeout.total_seconds() > 0):
        return timeout.total_seconds()
    return 300.0


class _StoreMessage:
    """A point-to-point message in the group's store, as a handle a _Work waits on: wait()
    takes it (and removes its key)."""

    def __init__(self, store, key, nbytes, src, tag, timeout):
        self._store, self._key, self._nbytes = store, key, nbytes
        self._src, self._tag, self._timeout = src, tag, timeout
        self.data = None

    def wait(self):
        # Polled with add(KEY/ready, 0), which never blocks (PyTorch 1.13's stores have no
        # check()): a TCPStore client holds its connection through a blocking wait(), which
        # would stop this process's own sends (and everything else on the store) meanwhile.
        deadline, pause = time.monotonic() + self._timeout, 0.0001
        while self._store.add(self._key + "/ready", 0) < 1:
            if time.monotonic() > deadline:
                raise _libtrain.TimeoutError(f"libtrain backend: recv from rank {self._src} (tag "
                                             f"{self._tag}) got no message within {self._timeout:g} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.005)
        data = self._store.get(self._key)
        try:
            for key in (self._key, self._key + "/ready"):
                self._store.delete_key(key)
        except (RuntimeError, AttributeError):
            pass  # a store that cannot delete keeps them (FileStore on some versions)
        if len(data) != self._nbytes:
            raise _libtrain.MismatchError(f"libtrain backend: recv from rank {self._src} (tag "
                                          f"{self._tag}) got {len(data)} bytes for a tensor of "
                                          f"{self._nbytes}")
        self.data = data


class _RecvWork(_Work):
    def __init__(self, handles, finish, result, src):
        super().__init__(handles, finish, result)
        self._src = src

    def source_rank(self):
        return self._src

    _source_rank = source_rank


def _stop_all(completer, p2p_completers):
    completer.stop()
    for c in list(p2p_completers.values()):
        c.stop()


_group_count = 0


@_compat.run_eagerly
class ProcessGroupLibtrain(_compat.GroupCompat, dist.ProcessGroup if _AVAILABLE else object):
    """torch.distributed process group on libtrain: shared memory in a node, a TCP ring across
    nodes. CPU tensors (others go through CPU copies). Every rank must issue the same collectives
    in the same order, as c10d requires of every backend."""

    def __init__(self, store, rank, size, timeout):
        global _group_count
        super().__init__(rank, size)
        self._comm = _make_communicator(store, rank, size, timeout)
        self._store, self._p2p_timeout = store, _p2p_timeout(timeout)
        self._p2p_sent, self._p2p_completers = {}, {}  # (src, dst, tag) -> count; src -> _Completer
        _group_count += 1
        self._label = _group_count
        self._completer = _Completer(_group_count)
        weakref.finalize(self, _stop_all, self._completer, self._p2p_completers)

    # ---- what c10d asks of a backend ----------------------------------------------------------

    def getBackendName(self):
        return BACKEND_NAME

    def _issue(self, handles, finish, result):
        work = _Work(handles, finish, result)
        self._completer.submit(work)
        return work

    # ---- allreduce ------------------------------------------------------------------------------

    def _allreduce(self, t, op, copy_in=True, private=False):
        b = _Buf(t, reduce=True, copy_in=copy_in, private=private)
        return b, self._comm.allreduce(b.buf, b.addr, b.count, b.dtype, op, "c10d.allreduce")

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "allreduce")
        b, h = self._allreduce(t, _reduce_op(opts))
        return self._issue([h], b.copy_back, [t])

    def allreduce_coalesced(self, tensors, opts=None):
        op = _reduce_op(opts)
        pairs = [self._allreduce(_tensor(t, "allreduce_coalesced"), op) for t in tensors]

        def finish():
            for b, _ in pairs:
                b.copy_back()
        return self._issue([h for _, h in pairs], finish, list(tensors))

    def reduce(self, tensors, opts=None):
        """An allreduce whose result only the root keeps: other ranks' tensors are left as they are."""
        t = _one(tensors, "reduce")
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "reduce")
        mine = self.rank() == root
        b, h = self._allreduce(t, _reduce_op(opts), private=not mine)
        return self._issue([h], b.copy_back if mine else None, [t])

    # ---- broadcast ------------------------------------------------------------------------------

    def _check_root(self, root, what):
        if not isinstance(root, int) or not 0 <= root < self.size():
            raise ValueError(f"libtrain backend: {what} root {root!r} is not a rank of this group "
                             f"(0..{self.size() - 1})")

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        if isinstance(opts, int):  # the (tensor, root) overload
            root = opts
        else:
            root = opts.rootRank if opts is not None else 0
            if opts is not None and opts.rootTensor != 0:
                raise ValueError("libtrain backend: broadcast takes one tensor per process (rootTensor 0)")
        self._check_root(root, "broadcast")
        b = _Buf(t, copy_in=self.rank() == root)
        h = self._comm.broadcast(b.buf, b.addr, b.count, b.dtype, root, "c10d.broadcast")
        return self._issue([h], b.copy_back, [t])

    # ---- allgather and gather ---------------------------------------------------------------------

    def _gather_all(self, t):
        """Starts gathering every rank's `t` into a new flat CPU tensor (rank r's at r * numel)."""
        src = _Buf(t)
        flat = torch.empty(self.size() * t.numel(), dtype=src.buf.dtype)
        h = self._comm.allgather((src.buf, flat), src.addr, flat.data_ptr(), src.count, src.dtype,
                                 "c10d.allgather")
        return flat, h

    def _check_list(self, outs, t, what):
        if len(outs) != self.size():
            raise ValueError(f"libtrain backend: {what} needs a list of {self.size()} tensors (the group's "
                             f"size), got {len(outs)}")
        for o in outs:
            _tensor(o, what)
            if o.numel() != t.numel() or o.dtype != t.dtype:
                raise ValueError(f"libtrain backend: {what}: every tensor of the list must have the "
                                 f"input's {t.numel()} elements of {t.dtype}, got {o.numel()} of {o.dtype}")

    @staticmethod
    def _scatter_rows(flat, outs):
        n = flat.numel() // max(len(outs), 1)
        for r, o in enumerate(outs):
            o.copy_(flat[r * n:(r + 1) * n].view(o.shape))

    def _allgather_one(self, outs, t):
        self._check_list(outs, t, "allgather")
        flat, h = self._gather_all(t)
        return h, lambda: self._scatter_rows(flat, outs)

    def allgather(self, output_lists, inputs, opts=None):
        if isinstance(inputs, torch.Tensor):  # the (output list, input tensor) overload
            output_lists, inputs = [output_lists], [inputs]
        t = _one(inputs, "allgather")
        if len(output_lists) != 1:
            raise ValueError("libtrain backend: allgather takes one output list per process")
        h, finish = self._allgather_one(output_lists[0], t)
        return self._issue([h], finish, output_lists)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        if len(output_lists) != len(inputs):
            raise ValueError("libtrain backend: allgather_coalesced needs one output list per input")
        return self._coalesced([self._allgather_one(outs, _tensor(t, "allgather_coalesced"))
                                for outs, t in zip(output_lists, inputs)], output_lists)

    def _allgather_into(self, output, input):
        """Starts every rank's `input` into `output` (rank r's at r * numel): (handle, finish)."""
        _tensor(output, "all_gather_into_tensor")
        _tensor(input, "all_gather_into_tensor")
        if output.numel() != self.size() * input.numel() or output.dtype != input.dtype:
            raise ValueError(f"libtrain backend: all_gather_into_tensor: the output must hold "
                             f"{self.size()} x {input.numel()} elements of {input.dtype}, got "
                             f"{output.numel()} of {output.dtype}")
        src, dst = _Buf(input), _Buf(output, copy_in=False)
        h = self._comm.allgather((src.buf, dst.buf), src.addr, dst.addr, src.count, src.dtype,
                                 "c10d.allgather")
        return h, dst.copy_back

    def _allgather_base(self, output, input, opts=None):
        h, finish = self._allgather_into(output, input)
        return self._issue([h], finish, [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced([self._allgather_into(o, i) for o, i in zip(outputs, inputs)], outputs)

    def _coalesced(self, parts, result):
        """One work for several (handle, finish) pairs."""
        def finish():
            for _, f in parts:
                f()
        return self._issue([h for h, _ in parts], finish, list(result))

    def gather_single(self, output, input, opts=None):
        """Every rank's `input` into the root's `output` (rank r's at r * numel)."""
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "gather")
        if self.rank() == root:
            h, finish = self._allgather_into(output, input)
            return self._issue([h], finish, [output])
        _, h = self._gather_all(input)
        return self._issue([h], None, [output])

    def gather(self, output_lists, inputs, opts=None):
        """An allgather of which the root keeps the result."""
        t = _one(inputs, "gather")
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "gather")
        if self.rank() == root:
            if len(output_lists) != 1:
                raise ValueError("libtrain backend: gather takes one output list on the root")
            self._check_list(output_lists[0], t, "gather")
        elif output_lists and any(len(o) for o in output_lists):
            raise ValueError("libtrain backend: gather: only the root rank takes a gather_list")
        flat, h = self._gather_all(t)
        finish = (lambda: self._scatter_rows(flat, output_lists[0])) if self.rank() == root else None
        return self._issue([h], finish, output_lists)

    def scatter(self, outputs, input_lists, opts=None):
        """The root's list, concatenated, is broadcast; each rank keeps its piece."""
        out = _one(outputs, "scatter")
        root = opts.rootRank if opts is not None else 0
        self._check_root(root, "scatter")
        flat = torch.empty(self.size() * out.numel(), dtype=out.dtype)
        if self.rank() == root:
            if len(input_lists) != 1:
                raise ValueError("libtrain backend: scatter takes one input list on the root")
            self._check_list(input_lists[0], out, "scatter")
            for r, i in enumerate(input_lists[0]):
                flat[r * out.numel():(r + 1) * out.numel()].copy_(i.reshape(-1))
        elif input_lists and any(len(i) for i in input_lists):
            raise ValueError("libtrain backend: scatter: only the root rank takes a scatter_list")
        b = _Buf(flat)
        h = self._comm.broadcast(b.buf, b.addr, b.count, b.dtype, root, "c10d.scatter")
        me, n = self.rank(), out.numel()
        return self._issue([h], lambda: out.copy_(flat[me * n:(me + 1) * n].view(out.shape)), [out])

    # ---- reduce_scatter -------------------------------------------------------------------------

    def _reduce_scatter_flat(self, flat, out, op, result):
        """Allreduces the private CPU tensor `flat` (size * out.numel() elements) and keeps this
        rank's slice: n times the bytes of a ring reduce-scatter, on libtrain's allreduce."""
        return self._issue(*self._reduce_scatter_part(flat, out, op), result)

    def _reduce_scatter_part(self, flat, out, op):
        """(handles, finish) of _reduce_scatter_flat."""
        b, h = self._allreduce(flat, op, private=False)
        me, n = self.rank(), out.numel()
        return [h], lambda: out.copy_(b.buf[me * n:(me + 1) * n].view(out.shape))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        out = _one(outputs, "reduce_scatter")
        if len(input_lists) != 1:
            raise ValueError("libtrain backend: reduce_scatter takes one input list per process")
        self._check_list(input_lists[0], out, "reduce_scatter")
        op = _reduce_op(opts)
        flat = torch.cat([i.reshape(-1).to("cpu") for i in input_lists[0]])
        return self._reduce_scatter_flat(flat, out, op, [out])

    def _check_reduce_scatter_tensor(self, output, input):
        _tensor(output, "reduce_scatter_tensor")
        _tensor(input, "reduce_scatter_tensor")
        if input.numel() != self.size() * output.numel() or output.dtype != input.dtype:
            raise ValueError(f"libtrain backend: reduce_scatter_tensor: the input must hold "
                             f"{self.size()} x {output.numel()} elements of {output.dtype}, got "
                             f"{input.numel()} of {input.dtype}")

    def _reduce_scatter_base(self, output, input, opts=None):
        self._check_reduce_scatter_tensor(output, input)
        flat = input.detach().to("cpu", copy=True).reshape(-1)
        return self._reduce_scatter_flat(flat, output, _reduce_op(opts), [output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op, parts = _reduce_op(opts), []
        for output, input in zip(outputs, inputs):
            self._check_reduce_scatter_tensor(output, input)
            flat = input.detach().to("cpu", copy=True).reshape(-1)
            hs, finish = self._reduce_scatter_part(flat, output, op)
            parts.append((hs[0], finish))
        return self._coalesced(parts, outputs)

    # ---- all_to_all -----------------------------------------------------------------------------

    def _alltoall(self, send, send_counts, recv_counts, deliver, even):
        """Every rank's flat byte tensor `send` (send_counts[j] bytes for rank j, in order) goes
        out through one allgather; deliver(pieces) gets the pieces for this rank in rank order.
        Unless every rank splits evenly (`even`, the same on all ranks), a first, synchronous
        allgather tells every rank everyone's counts."""
        n, me = self.size(), self.rank()
        if len(send_counts) != n or len(recv_counts) != n:
            raise ValueError(f"libtrain backend: all_to_all needs {n} splits per direction")
        if even:
            counts = None  # every rank's layout is known
            width = send.numel()
        else:
            mine = torch.tensor(send_counts, dtype=torch.int64)
            everyone = torch.empty(n * n, dtype=torch.int64)
            self._comm.allgather((mine, everyone), mine.data_ptr(), everyone.data_ptr(), n, "int64",
                                 "c10d.alltoall.splits").wait()
            counts = everyone.view(n, n).tolist()
            width = max(sum(row) for row in counts)
            if send.numel() < width:
                send = torch.cat([send, send.new_zeros(width - send.numel())])
        flat = torch.empty(n * width, dtype=torch.uint8)
        h = self._comm.allgather((send, flat), send.data_ptr(), flat.data_ptr(), width, "uint8",
                                 "c10d.alltoall")

        def finish():
            pieces = []
            for r in range(n):
                row = counts[r] if counts is not None else [send_counts[0]] * n
                if row[me] != recv_counts[r]:
                    raise _libtrain.MismatchError(
                        f"libtrain backend: all_to_all: rank {r} sends {row[me]} bytes to rank {me}, "
                        f"which expects {recv_counts[r]}")
                start = r * width + sum(row[:me])
                pieces.append(flat[start:start + row[me]])
            deliver(pieces)
        return h, finish

    @staticmethod
    def _bytes(t):
        if not t.numel():
            return torch.empty(0, dtype=torch.uint8)
        return t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _tensor(output, "all_to_all_single")
        _tensor(input, "all_to_all_single")
        n = self.size()
        if output.dtype != input.dtype:
            raise ValueError("libtrain backend: all_to_all_single needs one dtype for input and output")
        row_bytes = (input[0].numel() if input.dim() and input.shape[0] else 0) * input.element_size()
        if not output_split_sizes and not input_split_sizes:
            if input.shape[0] % n or output.numel() != input.numel():
                raise ValueError(f"libtrain backend: all_to_all_single: {input.shape[0]} rows cannot be "
                                 f"split evenly over {n} ranks into an output of the same size; pass splits")
            send_counts = recv_counts = [input.numel() * input.element_size() // n] * n
        else:
            if output.dim() == 0 or input.dim() == 0:
                raise ValueError("libtrain backend: all_to_all_single splits need tensors of rank >= 1")
            out_row = (output.numel() // output.shape[0] if output.shape[0] else 0) * output.element_size()
            ins = list(input_split_sizes) or [input.shape[0] // n] * n
            outs = list(output_split_sizes) or [output.shape[0] // n] * n
            send_counts = [int(s) * row_bytes for s in ins]
            recv_counts = [int(s) * out_row for s in outs]
        dst = _Buf(output, copy_in=False)

        def deliver(pieces):
            data = torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.uint8)
            if data.numel() != dst.buf.numel() * dst.buf.element_size():
                raise _libtrain.MismatchError("libtrain backend: all_to_all_single received "
                                              f"{data.numel()} bytes for an output of "
                                              f"{dst.buf.numel() * dst.buf.element_size()}")
            if data.numel():
                dst.buf.reshape(-1).view(torch.uint8).copy_(data)
            dst.copy_back()
        h, finish = self._alltoall(self._bytes(input), send_counts, recv_counts, deliver,
                                   even=not output_split_sizes and not input_split_sizes)
        return self._issue([h], finish, [output])

    def alltoall(self, outputs, inputs, opts=None):
        n = self.size()
        if len(outputs) != n or len(inputs) != n:
            raise ValueError(f"libtrain backend: all_to_all needs lists of {n} tensors")
        send = torch.cat([self._bytes(_tensor(t, "all_to_all")) for t in inputs])
        send_counts = [t.numel() * t.element_size() for t in inputs]
        recv_counts = [_tensor(t, "all_to_all").numel() * t.element_size() for t in outputs]

        def deliver(pieces):
            for o, p in zip(outputs, pieces):
                if o.numel():
                    o.copy_(p.clone().view(o.dtype).view(o.shape))  # clone: aligned for view(dtype)
        h, finish = self._alltoall(send, send_counts, recv_counts, deliver, even=False)
        return self._issue([h], finish, outputs)

    # ---- barrier, and what is not implemented ---------------------------------------------------

    def barrier(self, opts=None):
        """A one-element allreduce: it finishes on a rank only once every rank has joined it."""
        token = torch.zeros(1, dtype=torch.int32)
        h = self._comm.allreduce(token, token.data_ptr(), 1, "int32", "max", "c10d.barrier")
        return self._issue([h], None, [])

    # ---- point-to-point ---------------------------------------------------------------------------

    def _check_peer(self, peer, what):
        if not isinstance(peer, int) or not 0 <= peer < self.size() or peer == self.rank():
            raise ValueError(f"libtrain backend: {what} peer {peer!r} is not another rank of this "
                             f"group (0..{self.size() - 1}, not {self.rank()})")

    def _p2p_key(self, src, dst, tag):
        """The store key of the next message from src to dst with tag: both ends count their
        messages per (src, dst, tag), so messages are matched in the order they were sent."""
        seq = self._p2p_sent.get((src, dst, tag), 0)
        self._p2p_sent[(src, dst, tag)] = seq + 1
        return f"libtrain/p2p/{src}-{dst}/{tag}/{seq}"

    def send(self, tensors, dst, tag=0):
        """The tensor's bytes go into the group's store at once; the work is complete on return."""
        t = _one(tensors, "send")
        self._check_peer(dst, "send")
        key = self._p2p_key(self.rank(), dst, tag)
        self._store.set(key, self._bytes(t).numpy().tobytes())
        self._store.add(key + "/ready", 1)  # what the receiver polls (_StoreMessage.wait)
        work = _Work([], None, [t])
        work._complete()
        work._resolve()
        return work

    def recv(self, tensors, src, tag=0):
        """Completed, once the message is in the store, by a thread that serves this sender's
        messages only (a receive from one rank never waits behind one from another)."""
        t = _one(tensors, "recv")
        self._check_peer(src, "recv")
        dst = _Buf(t, copy_in=False)
        message = _StoreMessage(self._store, self._p2p_key(src, self.rank(), tag),
                                dst.buf.numel() * dst.buf.element_size(), src, tag, self._p2p_timeout)

        def finish():
            if message.data:
                data = torch.frombuffer(bytearray(message.data), dtype=torch.uint8)
                dst.buf.reshape(-1).view(torch.uint8).copy_(data)
            dst.copy_back()
        work = _RecvWork([message], finish, [t], src)
        if src not in self._p2p_completers:
            self._p2p_completers[src] = _Completer(f"{self._label}-recv{src}")
        self._p2p_completers[src].submit(work)
        return work

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("libtrain backend: recv from any source is not implemented; name the "
                           "sender (dist.recv(tensor, src=...))")


def _create(store, rank, size, timeout):
    return ProcessGroupLibtrain(store, rank, size, timeout)


if _AVAILABLE and not hasattr(dist.Backend, BACKEND_NAME.upper()):
    _compat.tcpstore_without_libuv()
    _compat.register_backend(BACKEND_NAME, _create)
