# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""DistributedOptimizer of libtrain.torch: Horovod's, on libtrain's communicator.

The parameters are laid out once into buckets (reverse registration order, which is roughly the
order backward produces gradients; at most LIBTRAIN_TORCH_BUCKET_BYTES each, one dtype each).
Each gradient is accumulated straight into its slot of the bucket's flat buffer (after the first
step `p.grad` *is* that slot), and a hook on the parameter's gradient accumulator launches the
bucket's allreduce as soon as its last gradient is in, while backward goes on with the layers
below. Buckets launch strictly in bucket order, so every rank issues the same collectives in the
same order whatever order its hooks fire in. step() waits for them (synchronize()), then steps.
"""
import contextlib
import warnings

import torch

from . import _ops
from .._env import env_whole
from ._compression import Compression

# Measured on bench/torch: small enough that the first buckets overlap backward, large enough
# that per-collective latency does not dominate (see bench/torch/README.md).
_DEFAULT_BUCKET_BYTES = 4 << 20
_MAX_BUCKET_BYTES = 1 << 40  # as libtrain's other byte counts (src/communicator.cc)


def _bucket_bytes():
    return env_whole("LIBTRAIN_TORCH_BUCKET_BYTES", _DEFAULT_BUCKET_BYTES, 1, _MAX_BUCKET_BYTES, "bytes")


class _Bucket:
    """Parameters whose gradients are reduced together, in one flat buffer."""

    def __init__(self, index, params, names):
        self.index, self.params, self.names = index, params, names
        first = params[0]
        self.flat = torch.zeros(sum(p.numel() for p in params), dtype=first.dtype, device=first.device)
        self.slots, offset = {}, 0
        for p in params:
            self.slots[p] = self.flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        self.ready = set()
        self.launched = None  # (works, finish) while in flight
        self.name = f"allreduce.bucket{index}.{names[0]}"


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's class by DistributedOptimizer()."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self._passes = backward_passes_per_step
        all_params = [p for group in self.param_groups for p in group["params"]]
        self._names = _parameter_names(named_parameters, all_params)
        self._buckets = self._make_buckets([p for p in all_params if p.requires_grad])
        self._bucket_of = {p: b for b in self._buckets for p in b.params}
        self._delay = {p: self._passes for p in self._bucket_of}
        self._next_launch = 0
        self._synchronized = False
        self._should_synchronize = True
        self._accumulators = []
        if _ops._world().size > 1:
            self._register_hooks()

    # -- layout -------------------------------------------------------------------------------

    def _make_buckets(self, params):
        cap, buckets, current, size = _bucket_bytes(), [], [], 0
        for p in reversed(params):
            nbytes = p.numel() * p.element_size()
            if current and (p.dtype != current[0].dtype or p.device != current[0].device or size + nbytes > cap):
                buckets.append(current)
                current, size = [], 0
            current.append(p)
            size += nbytes
        if current:
            buckets.append(current)
        return [_Bucket(i, ps, [self._names[p] for p in ps]) for i, ps in enumerate(buckets)]

    def _register_hooks(self):
        for p in self._bucket_of:
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._make_hook(p))
            self._accumulators.append(accumulator)  # hooks live as long as their accumulator

    def _make_hook(self, p):
        def hook(*_):
            if p in self._bucket_of[p].ready:
                raise AssertionError(
                    f"libtrain.torch: gradient of '{self._names[p]}' computed twice before step(); "
                    "call optimizer.synchronize() between backward passes or raise backward_passes_per_step")
            self._delay[p] -= 1
            if self._delay[p] == 0:
                self._gradient_ready(p)
        return hook

    # -- reduction ------------------------------------------------------------------------------

    def _adopt_gradient(self, p, bucket):
        """Makes p.grad the parameter's slot of the bucket (a view), copying a fresh gradient in."""
        slot = bucket.slots[p]
        if p.grad is None:
            slot.zero_()
        elif p.grad.data_ptr() != slot.data_ptr():
            slot.copy_(p.grad)
        p.grad = slot

    def _gradient_ready(self, p):
        bucket = self._bucket_of[p]
        self._adopt_gradient(p, bucket)
        bucket.ready.add(p)
        self._launch_ready()

    def _launch_ready(self):
        while self._next_launch < len(self._buckets):
            bucket = self._buckets[self._next_launch]
            if len(bucket.ready) < len(bucket.params):
                return
            self._launch(bucket)

    def _launch(self, bucket):
        op, pre, post = self._op, 1.0, 1.0
        if op == _ops.Average and self._predivide != 1.0:
            op, pre, post = _ops.Sum, 1.0 / self._predivide, self._predivide / _ops._world().size
        sent, ctx = self._compression.compress(bucket.flat)
        works, finish = _ops._allreduce_start(sent, sent, op, bucket.name, pre, post)

        def done():
            reduced = finish()
            if reduced is not bucket.flat:
                bucket.flat.copy_(self._compression.decompress(reduced, ctx))

        bucket.launched = (works, done)
        self._next_launch += 1

    def synchronize(self):
        """Waits for every gradient's allreduce; parameters whose gradients never came (unused
        this step) are reduced with zeros, as Horovod does. Leaves averaged gradients in p.grad."""
        if _ops._world().size == 1:
            self._synchronized = True
            return
        for bucket in self._buckets:
            for p in bucket.params:
                if p not in bucket.ready:
                    self._adopt_gradient(p, bucket)
                    bucket.ready.add(p)
        self._launch_ready()
        try:
            for bucket in self._buckets:
                works, done = bucket.launched
                for w in works:
                    w.wait()
                done()
        finally:
            for bucket in self._buckets:
                bucket.ready.clear()
                bucket.launched = None
            self._next_launch = 0
            self._delay = {p: self._passes for p in self._bucket_of}
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within it, step() does not synchronize (call synchronize() yourself first, e.g. to clip
        the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("libtrain.torch: optimizer.step() called without a backward pass since "
                              "optimizer.synchronize(); within skip_synchronize() it does not synchronize again")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none=False):
        if any(b.ready for b in self._buckets):
            raise AssertionError("libtrain.torch: optimizer.zero_grad() was called after loss.backward() "
                                 "but before optimizer.step() or optimizer.synchronize()")
        return super(self.__class__, self).zero_grad(set_to_none)


def _parameter_names(named_parameters, all_params):
    if named_parameters is None:
        return {p: f"noname.{i}" for i, p in enumerate(all_params)}
    named = list(named_parameters)
    if named and not isinstance(named[0], tuple):
        raise ValueError("libtrain.torch: named_parameters should be a sequence of (name, parameter) "
                         "pairs, usually model.named_parameters()")
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"libtrain.torch: named_parameters has duplicate names: {', '.join(dupes)}")
    by_param = {p: n for n, p in named}
    missing = [i for i, p in enumerate(all_params) if p not in by_param]
    if missing:
        raise ValueError("libtrain.torch: named_parameters lacks parameters the optimizer updates "
                         f"(positions {missing[:5]}); pass model.named_parameters() of the same model")
    return by_param


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=_ops.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wraps `optimizer` so that step() uses gradients averaged (op=Average, or Sum) over all
    ranks. The result is an instance of the optimizer's own class (LR schedulers accept it).
    Gradients are reduced in buckets from hooks while backward runs; step() waits."""
    _ops._no_process_set(process_set)
    op = _ops.resolve_op(op=op)
    if op not in (_ops.Average, _ops.Sum):
        raise ValueError(f"libtrain.torch: DistributedOptimizer reduces gradients with Average or Sum, not {op!r}")
    if gradient_predivide_factor != 1.0 and op != _ops.Average:
        raise ValueError("libtrain.torch: gradient_predivide_factor needs op=Average")
    if backward_passes_per_step < 1:
        raise ValueError("libtrain.torch: backward_passes_per_step must be at least 1")
    if groups is not None or num_groups:
        warnings.warn("libtrain.torch: groups/num_groups are ignored; buckets are formed by size "
                      "(LIBTRAIN_TORCH_BUCKET_BYTES)")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor)
