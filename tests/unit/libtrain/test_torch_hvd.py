# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""libtrain.torch, Horovod's PyTorch API: spawns 4 local ranks faking 2 nodes x 2 (LIBTRAIN_NODE),
so collectives cross both shared memory and the TCP ring, and checks every collective and option
against values each rank computes itself; DistributedOptimizer and SyncBatchNorm against one
process on the whole batch; errors (mismatches, a dead rank, a stalled rank) as exceptions on
every rank within LIBTRAIN_TIMEOUT; hvd.init() beside torch.distributed's env:// rendezvous, in
either order. The `cuda` scenario (alone) needs NCCL and a CUDA-enabled
PyTorch, and exits 77 (skipped) without them. Scenarios that must succeed run one after the other
in one set of ranks (A+B+C). The ranks are forked from this process, which imports PyTorch and
libtrain once (forked_ranks.py): a fresh interpreter per rank cost 4 PyTorch imports a set, most of the
suite's time. The cuda scenario starts fresh interpreters: CUDA does not survive a fork.
usage: test_torch_hvd.py [SCENARIO[+SCENARIO...]...]"""
import json
import os
import socket
import sys
import tempfile
import time

import forked_ranks

RANKS = 4

# Runs in every rank: the scenario named in argv[1]. Prints "RESULT <json>" at the end.
RANK_CODE = r'''
import json, os, sys, math
import torch
import libtrain
import libtrain.torch as hvd

torch.set_num_threads(1)
if os.environ.get("DIST_BEFORE_HVD"):  # torch.distributed's env:// rendezvous holds MASTER_PORT
    import datetime, torch.distributed as dist
    dist.init_process_group(os.environ["DIST_BEFORE_HVD"], timeout=datetime.timedelta(seconds=30))
hvd.init()
r, n = hvd.rank(), hvd.size()
scenario = sys.argv[1]
result = {}


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {r}: {what}")


def expect(exc, fn, what):
    try:
        fn()
    except exc as e:
        return str(e)
    raise AssertionError(f"rank {r}: {what}: no {exc.__name__}")


def collectives():
    check((n, hvd.local_size(), hvd.cross_size()) == (4, 2, 2), "topology")
    check(hvd.local_rank() == r % 2 and hvd.cross_rank() == r // 2, "local/cross rank")
    check(not hvd.mpi_built() and not hvd.gloo_built(), "mpi/gloo built must be False")
    check(hvd.nccl_built() == ("transport:nccl" in libtrain.check_build()), "nccl_built truthful")
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        t = torch.full((1001,), r + 1, dtype=dtype)
        check(torch.equal(hvd.allreduce(t, op=hvd.Sum), torch.full_like(t, 10)), f"sum {dtype}")
        check(torch.equal(t, torch.full_like(t, r + 1)), f"allreduce left its input alone {dtype}")
        check(torch.equal(hvd.allreduce(t, op=hvd.Max), torch.full_like(t, 4)), f"max {dtype}")
        check(torch.equal(hvd.allreduce(t, op=hvd.Min), torch.full_like(t, 1)), f"min {dtype}")
        if dtype.is_floating_point:
            check(torch.equal(hvd.allreduce(t), torch.full_like(t, 2.5)), f"average {dtype}")
            check(torch.equal(hvd.allreduce(t, average=False), torch.full_like(t, 10)), f"average=False {dtype}")
    # In place, without a copy: the result lands in the tensor's own storage.
    t = torch.arange(6, dtype=torch.float32) * (r + 1)
    ptr = t.data_ptr()
    out = hvd.allreduce_(t, op=hvd.Sum)
    check(out is t and t.data_ptr() == ptr and torch.equal(t, torch.arange(6.0) * 10), "allreduce_ in place")
    # Non-contiguous: a transposed view, reduced in place through a contiguous copy.
    base = torch.arange(12, dtype=torch.float64).view(3, 4) * (r + 1)
    view = base.t()
    hvd.allreduce_(view, op=hvd.Sum)
    check(torch.equal(base, torch.arange(12.0, dtype=torch.float64).view(3, 4) * 10), "non-contiguous allreduce_")
    check(torch.equal(hvd.allreduce(torch.ones(4, 2).t() * r, op=hvd.Sum), torch.full((2, 4), 6.0)),
          "non-contiguous allreduce")
    # Empty tensors.
    check(hvd.allreduce(torch.empty(0)).numel() == 0, "empty allreduce")
    check(hvd.broadcast(torch.empty(0, 3), 0).shape == (0, 3), "empty broadcast")
    # Async, poll, synchronize.
    handles = [hvd.allreduce_async(torch.full((100000,), float(r)), name=f"async.{i}", op=hvd.Sum) for i in range(5)]
    outs = [hvd.synchronize(h) for h in handles]
    check(all(torch.equal(o, torch.full((100000,), 6.0)) for o in outs), "allreduce_async")
    t = torch.full((10,), float(r))
    h = hvd.allreduce_async_(t, name="async_", op=hvd.Sum)
    while not hvd.poll(h):
        pass
    check(hvd.synchronize(h) is t and torch.equal(t, torch.full((10,), 6.0)), "allreduce_async_ + poll")
    expect(ValueError, lambda: hvd.synchronize(h), "synchronize twice")
    # Scaling, compression, options.
    t = torch.full((8,), 1.0)
    check(torch.equal(hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), torch.full((8,), 4.0)),
          "prescale/postscale")
    c = hvd.allreduce(torch.full((8,), 0.25 * (r + 1)), compression=hvd.Compression.fp16)
    check(c.dtype == torch.float32 and torch.allclose(c, torch.full((8,), 0.625)), "Compression.fp16")
    expect(ValueError, lambda: hvd.allreduce(t, average=True, op=hvd.Sum), "average and op")
    expect(NotImplementedError, lambda: hvd.allreduce(t, op=hvd.Adasum), "Adasum")
    expect(ValueError, lambda: hvd.allreduce(torch.zeros(3, dtype=torch.int8)), "int8")
    expect(ValueError, lambda: hvd.allreduce(torch.zeros(3, dtype=torch.uint8), op=hvd.Sum), "uint8 sum")
    # Gradients flow through allreduce (average of averages) and allgather.
    x = torch.full((3,), float(r), requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum) * (r + 1)).sum().backward()
    check(torch.equal(x.grad, torch.full((3,), 10.0)), "allreduce gradient")
    # allgather: first dimensions differ per rank.
    g = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int64), name="ag")
    check(g.shape == (10, 2) and g[:, 0].tolist() == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3], "allgather uneven")
    g = hvd.synchronize(hvd.allgather_async(torch.full((2, 3), float(r)).t()))
    check(g.shape == (12, 2) and torch.equal(g[::3, 0], torch.arange(4.0)), "allgather non-contiguous")
    y = torch.full((r + 1,), 1.0, requires_grad=True)
    (hvd.allgather(y) * torch.arange(10.0)).sum().backward()
    first = sum(range(1, r + 1))
    check(torch.equal(y.grad, torch.arange(first, first + r + 1, dtype=torch.float32) * 4), "allgather gradient")
    # broadcast.
    check(torch.equal(hvd.broadcast(torch.tensor([r * 10.0]), 3), torch.tensor([30.0])), "broadcast")
    t = torch.full((3, 3), float(r)).t()
    hvd.broadcast_(t, 2)
    check(torch.equal(t, torch.full((3, 3), 2.0)), "broadcast_ non-contiguous")
    t = torch.full((5,), float(r), dtype=torch.bfloat16)
    check(torch.equal(hvd.synchronize(hvd.broadcast_async_(t, 1)), torch.full((5,), 1.0, dtype=torch.bfloat16)),
          "broadcast_async_")
    expect(ValueError, lambda: hvd.broadcast(t, 4), "root out of range")
    # alltoall.
    a = hvd.alltoall(torch.arange(8) + 100 * r)
    check(a.tolist() == [100 * s + 2 * r + k for s in range(4) for k in range(2)], "alltoall even")
    splits = [r + 1 if k == (r + 1) % 4 else 0 for k in range(4)]
    a, received = hvd.alltoall(torch.full((r + 1, 2), r), splits=splits)
    sender = (r - 1) % 4
    check(received.tolist() == [sender + 1 if k == sender else 0 for k in range(4)], "alltoall splits")
    check(a.shape == (sender + 1, 2) and bool((a == sender).all()), "alltoall data")
    # Objects and barrier/join.
    obj = hvd.broadcast_object({"rank": r, "list": [r] * 3}, root_rank=1)
    check(obj == {"rank": 1, "list": [1, 1, 1]}, "broadcast_object")
    # Tensors inside objects travel as raw bytes (no torch.load, which PyTorch >= 2.6 restricts).
    obj = hvd.broadcast_object({"w": torch.arange(6.0).view(2, 3).t() * (r + 1), "b": torch.tensor(r, dtype=torch.bfloat16),
                                "p": torch.nn.Parameter(torch.ones(2) * r), "e": torch.empty(0, 3)}, root_rank=2)
    check(torch.equal(obj["w"], torch.arange(6.0).view(2, 3).t() * 3) and obj["b"].dtype == torch.bfloat16
          and obj["b"].item() == 2 and isinstance(obj["p"], torch.nn.Parameter) and obj["p"].tolist() == [2.0, 2.0]
          and obj["e"].shape == (0, 3), f"broadcast_object with tensors: {obj}")
    check(hvd.allgather_object(("x", r)) == [("x", k) for k in range(4)], "allgather_object")
    hvd.barrier()
    check(0 <= hvd.join() < 4, "join")


def model_and_data(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                torch.nn.ReLU(), torch.nn.Linear(32, 3))
    data_seed = torch.Generator().manual_seed(1234)   # the same data on every rank, whatever `seed`
    data = torch.randn(6, 8 * n, 10, generator=data_seed)      # 6 steps of a global batch of 8 per rank
    target = torch.randint(0, 3, (6, 8 * n), generator=data_seed)
    return model, data, target


def train(model, opt, data, target, shard, passes=1):
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(data.shape[0]):
        opt.zero_grad()
        x, y = data[step][shard], target[step][shard]
        for part in range(passes):
            piece = slice(part * x.shape[0] // passes, (part + 1) * x.shape[0] // passes)
            (loss_fn(model(x[piece]), y[piece]) / passes).backward()
        opt.step()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def optimizer():
    mine = slice(r * 8, (r + 1) * 8)
    reference, data, target = model_and_data()
    train(reference, torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9), data, target, slice(None))
    expected = flat(reference)
    for options in ({}, {"backward_passes_per_step": 2}, {"gradient_predivide_factor": 2.0},
                    {"compression": hvd.Compression.fp16}):
        model, data, target = model_and_data(seed=r)   # different start: broadcast must fix it
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(), **options)
        check(isinstance(opt, torch.optim.SGD), "DistributedOptimizer is an SGD")
        train(model, opt, data, target, mine, passes=options.get("backward_passes_per_step", 1))
        got = flat(model)
        same = hvd.allgather(got.unsqueeze(0))
        check(all(torch.equal(same[0], same[k]) for k in range(n)), f"{options}: weights differ between ranks")
        tol = 1e-2 if "compression" in options else 1e-5
        check(torch.allclose(got, expected, atol=tol), f"{options}: differs from one process on the whole batch "
              f"by {float((got - expected).abs().max())}")
    # op=Sum: gradients summed, so n times the step of the average.
    model, data, target = model_and_data()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1 / n),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    reference, _, _ = model_and_data()
    train(model, opt, data[:1], target[:1], mine)
    train(reference, torch.optim.SGD(reference.parameters(), lr=0.1), data[:1], target[:1], slice(None))
    check(torch.allclose(flat(model), flat(reference), atol=1e-5), "op=Sum")
    # Unused parameters on some ranks, skip_synchronize for clipping, LR scheduler, errors.
    model, data, target = model_and_data()
    extra = torch.nn.Linear(3, 3)
    params = list(model.parameters()) + list(extra.parameters())
    named = list(model.named_parameters()) + [("extra." + k, v) for k, v in extra.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), named_parameters=named)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    out = model(data[0][mine])
    if r % 2:
        out = extra(out)   # only odd ranks use `extra`: even ranks contribute zeros
    out.sum().backward()
    expect(AssertionError, opt.zero_grad, "zero_grad between backward and step")
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    grads = hvd.allgather(torch.cat([p.grad.reshape(-1) for p in params]).unsqueeze(0))
    check(all(torch.equal(grads[0], grads[k]) for k in range(n)), "synchronized gradients differ")
    with opt.skip_synchronize():
        opt.step()
    sched.step()
    check(abs(opt.param_groups[0]["lr"] - 0.05) < 1e-12, "LR scheduler on the wrapped optimizer")
    expect(ValueError, lambda: hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1),
                                                        named_parameters=[("a", params[0])] * 2), "duplicate names")
    expect(ValueError, lambda: hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), op=hvd.Max), "op=Max")
    # broadcast_optimizer_state: rank 0's momentum buffers and hyper-parameters everywhere.
    model, data, target = model_and_data()
    adam = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1))
    if r == 0:
        model(data[0]).sum().backward()
        adam.step()
    hvd.broadcast_optimizer_state(adam, root_rank=0)
    state = adam.state_dict()
    check(state["param_groups"][0]["lr"] == 0.01 and len(state["state"]) == 6, "broadcast_optimizer_state")
    sums = hvd.allgather(torch.tensor([[float(s["exp_avg"].sum()) for s in state["state"].values()]]))
    check(all(torch.equal(sums[0], sums[k]) for k in range(n)), "optimizer state differs between ranks")
    hvd.broadcast_parameters(model.named_parameters(), root_rank=2)
    # An optimizer state beyond tensors and plain Python data is refused on every rank.
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    sgd.param_groups[0]["dtype"] = torch.float16
    msg = expect(ValueError, lambda: hvd.broadcast_optimizer_state(sgd, root_rank=1), "optimizer state with a dtype")
    check("torch.dtype" in msg and "broadcast_object" in msg, msg)


def sync_batch_norm():
    torch.manual_seed(1)
    x = torch.randn(4 * n, 3, 5, 5)
    mine = x[r * 4:(r + 1) * 4].clone().requires_grad_()
    whole = x.clone().requires_grad_()
    sync, plain = hvd.SyncBatchNorm(3), torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        for bn in (sync, plain):
            bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
            bn.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))
    weights = torch.randn(4 * n, 3, 5, 5)
    (sync(mine) * weights[r * 4:(r + 1) * 4]).sum().backward()
    (plain(whole) * weights).sum().backward()
    check(torch.allclose(mine.grad, whole.grad[r * 4:(r + 1) * 4], atol=1e-5), "SyncBatchNorm input gradient")
    check(torch.allclose(hvd.allreduce(sync.weight.grad, op=hvd.Sum), plain.weight.grad, atol=1e-4),
          "SyncBatchNorm weight gradient")
    check(torch.allclose(sync.running_mean, plain.running_mean, atol=1e-6) and
          torch.allclose(sync.running_var, plain.running_var, atol=1e-5), "SyncBatchNorm running stats")
    sync.eval(), plain.eval()
    check(torch.allclose(sync(mine), plain(whole)[r * 4:(r + 1) * 4], atol=1e-5), "SyncBatchNorm eval")
    import torchvision
    net = torchvision.models.resnet18(num_classes=10, norm_layer=hvd.SyncBatchNorm)
    net(torch.randn(2, 3, 32, 32)).sum().backward()
    check(isinstance(net.bn1, hvd.SyncBatchNorm), "torchvision norm_layer")


def mismatch():
    which = os.environ["MISMATCH"]
    if which == "count":
        t = torch.zeros(10 + (r == 3))
    elif which == "dtype":
        t = torch.zeros(10, dtype=torch.int32 if r == 1 else torch.float32)
    else:
        hvd.allgather(torch.zeros(r + 1, 2 + (r == 2)), name="bad_gather")  # trailing dimensions differ
        return
    hvd.allreduce(t, op=hvd.Sum, name="bad")   # must raise on every rank


def dies():
    model, data, target = model_and_data()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
    for step in range(100000):
        if step == 3 and r == int(os.environ["DIE_RANK"]):
            if os.environ.get("STALL"):
                import time
                time.sleep(10)   # longer than LIBTRAIN_TIMEOUT: the others time out first
            os._exit(9)
        opt.zero_grad()
        model(data[step % 6][r * 8:(r + 1) * 8]).sum().backward()
        opt.step()


def torch_distributed():
    """hvd.init() and torch.distributed's env:// rendezvous (same MASTER_PORT) in one script, in
    either order: before it, hvd.init() shares torch's store; after it, the port is free again."""
    import datetime, torch.distributed as dist
    before = os.environ.get("DIST_BEFORE_HVD")
    if not before:  # a rank that fails here must not leave the others waiting 30 minutes
        dist.init_process_group(os.environ["DIST_AFTER_HVD"], timeout=datetime.timedelta(seconds=30))
    check(libtrain.bootstrap_method() == ("torch" if before else "env"), f"bootstrap {libtrain.bootstrap_method()}")
    check((dist.get_rank(), dist.get_world_size()) == (r, n), "torch's rank and size")
    check((hvd.local_size(), hvd.cross_size()) == (2, 2), "topology")
    want = [n * (n + 1) / 2] * 3
    for _ in range(2):  # interleaved
        t = torch.full((3,), float(r + 1))
        dist.all_reduce(t)
        check(t.tolist() == want, f"dist.all_reduce: {t.tolist()}")
        h = hvd.allreduce(torch.full((3,), float(r + 1)), op=hvd.Sum)
        check(h.tolist() == want, f"hvd.allreduce: {h.tolist()}")
    hvd.shutdown()  # and again: a second world over the same torch store takes fresh keys
    hvd.init()
    h = hvd.allreduce(torch.full((3,), float(r + 1)), op=hvd.Sum)
    check(h.tolist() == want and hvd.rank() == r, f"hvd.allreduce after init() again: {h.tolist()}")
    hvd.barrier()
    dist.barrier()
    dist.destroy_process_group()


def cuda():
    """CUDA tensors through the NCCL communicator: one device per local rank."""
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64):
        t = torch.full((1 << 20,), r + 1, dtype=dtype, device="cuda")
        check(torch.equal(hvd.allreduce(t, op=hvd.Sum).cpu(), torch.full((1 << 20,), 10, dtype=dtype)), f"cuda sum {dtype}")
    t = torch.full((3,), float(r), device="cuda")
    hvd.broadcast_(t, 2)
    check(torch.equal(t.cpu(), torch.full((3,), 2.0)), "cuda broadcast_")
    g = hvd.allgather(torch.full((r + 1,), float(r), device="cuda"))
    check(g.is_cuda and g.tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0], "cuda allgather")
    model = torch.nn.Linear(16, 4).cuda()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
    model(torch.randn(8, 16, device="cuda")).sum().backward()
    opt.step()
    same = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0).cpu())
    check(all(torch.equal(same[0], same[k]) for k in range(n)), "cuda DistributedOptimizer")


import time
started = time.monotonic()  # the seconds until an error are counted from here, not from the spawn
try:
    for name in scenario.split("+"):
        {"cuda": cuda, "collectives": collectives, "optimizer": optimizer, "sync_batch_norm": sync_batch_norm,
         "mismatch": mismatch, "dies": dies, "torch_distributed": torch_distributed}[name]()
except libtrain.Error as e:
    print(f"RESULT {json.dumps({'error': type(e).__name__, 'message': str(e), 'seconds': time.monotonic() - started})}",
          flush=True)
    sys.exit(3)
print("RESULT {}", flush=True)
hvd.shutdown()
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(scenario, extra_env=None, timeout=120):
    """Runs RANK_CODE on RANKS local processes (forked_ranks); returns [(exit code, stdout+stderr)]
    and seconds."""
    port = free_port()
    ranks = []
    start = time.monotonic()
    for r in range(RANKS):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(RANKS), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), LIBTRAIN_NODE=f"node{r // 2}", LIBTRAIN_TIMEOUT="20",
                   LIBTRAIN_BOOTSTRAP="env", OMP_NUM_THREADS="1")
        env.update(extra_env or {})
        ranks.append(forked_ranks.start(RANK_CODE, [scenario], env, fresh=scenario == "cuda"))
    codes = forked_ranks.wait(ranks, timeout)
    if "hung" in codes:
        raise AssertionError(f"{scenario}: a rank hung past {timeout} s")
    return [(code, rank.text()) for code, rank in zip(codes, ranks)], time.monotonic() - start


def result_of(out):
    lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
    return json.loads(lines[-1][7:]) if lines else None


def expect_success(scenario, extra_env=None):
    results, took = run_ranks(scenario, extra_env)
    for r, (code, out) in enumerate(results):
        if code != 0 or result_of(out) != {}:
            raise AssertionError(f"{scenario}: rank {r} exited {code}:\n{out}")
    print(f"ok {scenario} ({took:.1f} s)")


def expect_all_raise(scenario, extra_env, dead=None, within=None):
    results, took = run_ranks(scenario, extra_env)
    for r, (code, out) in enumerate(results):
        if r == dead:
            continue
        res = result_of(out)
        if code != 3 or not res or "error" not in res:
            raise AssertionError(f"{scenario} {extra_env}: rank {r} did not raise a libtrain error "
                                 f"(exit {code}):\n{out}")
    # Counted on each rank from the start of the scenario: starting PyTorch under load takes long.
    slowest = max(result_of(out)["seconds"] for r, (_, out) in enumerate(results) if r != dead)
    if within is not None and slowest > within:
        raise AssertionError(f"{scenario} {extra_env}: a rank raised after {slowest:.1f} s, more than {within} s")
    print(f"ok {scenario} {extra_env} ({took:.1f} s): " +
          "; ".join(f"{result_of(out)['error']}" for r, (_, out) in enumerate(results) if r != dead))
    return results


def cuda_missing():
    """Why the CUDA scenario cannot run here, or None."""
    import torch
    import libtrain
    if "transport:nccl" not in libtrain.check_build():
        return "libtrain was built without NCCL"
    if not torch.cuda.is_available():
        return "PyTorch has no CUDA device (Debian's python3-torch is built without CUDA)"
    return None


def main():
    if sys.argv[1:] == ["cuda"]:
        why = cuda_missing()
        if why:
            print(f"skipped: {why}")
            sys.exit(77)
        expect_success("cuda")
        return
    scenarios = sys.argv[1:] or ["collectives+optimizer+sync_batch_norm", "mismatch", "dies", "timeline",
                                 "torch_distributed"]
    forked_ranks.preload("torch", "libtrain", "libtrain.torch", "torchvision")
    for scenario in scenarios:
        succeeding = set(scenario.split("+")) <= {"collectives", "optimizer", "sync_batch_norm"}
        if not succeeding and scenario not in ("mismatch", "dies", "timeline", "torch_distributed"):
            raise SystemExit(f"test_torch_hvd.py: no scenario '{scenario}' (only collectives, optimizer and "
                             "sync_batch_norm join with +)")
        if succeeding:
            # Small buckets: the optimizer's gradients span several (only DistributedOptimizer reads it).
            expect_success(scenario, {"LIBTRAIN_TORCH_BUCKET_BYTES": "2048"})
        elif scenario == "mismatch":
            for which in ("count", "dtype", "shape"):
                results = expect_all_raise("mismatch", {"MISMATCH": which}, within=15)
                if which == "shape" and any(result_of(out)["error"] != "MismatchError" for _, out in results):
                    raise AssertionError("allgather of mismatched shapes: not MismatchError everywhere")
        elif scenario == "dies":
            expect_all_raise("dies", {"DIE_RANK": "3"}, dead=3, within=15)
            results = expect_all_raise("dies", {"DIE_RANK": "1", "STALL": "1", "LIBTRAIN_TIMEOUT": "4"},
                                       dead=1, within=30)
            if not any(result_of(out)["error"] == "TimeoutError" for r, (_, out) in enumerate(results) if r != 1):
                raise AssertionError("a stalled rank: no rank reported TimeoutError")
        elif scenario == "torch_distributed":
            expect_success(scenario, {"DIST_AFTER_HVD": "gloo"})
            expect_success(scenario, {"DIST_AFTER_HVD": "libtrain"})
            expect_success(scenario, {"DIST_BEFORE_HVD": "gloo"})
            expect_success(scenario, {"DIST_BEFORE_HVD": "libtrain"})
        elif scenario == "timeline":
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "trace-%r.json")
                expect_success("optimizer", {"LIBTRAIN_TIMELINE": path, "LIBTRAIN_TORCH_BUCKET_BYTES": "2048"})
                with open(path.replace("%r", "0")) as f:
                    text = f.read()
                for name in ("allreduce.bucket0.", "broadcast.", "broadcast_optimizer_state"):
                    if name not in text:
                        raise AssertionError(f"timeline lacks '{name}'")
                print("ok timeline")


if __name__ == "__main__":
    main()
