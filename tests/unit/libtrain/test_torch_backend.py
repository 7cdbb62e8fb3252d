# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""The torch.distributed backend "libtrain" (libtrain/torch/_backend.py): 4 ranks as 2 fake nodes
x 2 (LIBTRAIN_NODE), so both shared memory and the TCP ring run. Checks every direct collective
over dtypes, empty and non-contiguous tensors and async_op; DDP against single-process training
(and bitwise-equal weights on all ranks); the same DDP script on Gloo; a rank that exits mid-training
and a size mismatch, which must raise on every other rank (not hang) within LIBTRAIN_TIMEOUT."""
import os
import socket
import subprocess
import sys
import tempfile
import time

TIMEOUT = 10  # LIBTRAIN_TIMEOUT for the ranks

RANK_CODE = r'''
import os, sys, time
import torch, torch.distributed as dist
import libtrain, libtrain.torch

scenario, out_dir = sys.argv[1], sys.argv[2]
backend = "gloo" if scenario == "gloo" else "libtrain"
dist.init_process_group(backend)  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
r, n = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == backend, dist.get_backend()
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64]


def expect_raise(fn, kind, what):
    try:
        fn()
    except kind as e:
        return e
    raise AssertionError(f"{what}: no {kind.__name__} raised")


def check_collectives():
    tri = n * (n + 1) // 2
    for dt in DTYPES:
        t = torch.full((7, 3), r + 1, dtype=dt)
        dist.all_reduce(t)
        assert (t == tri).all(), (dt, t)
        for op, want in [(dist.ReduceOp.MAX, n), (dist.ReduceOp.MIN, 1)]:
            t = torch.full((5,), r + 1, dtype=dt)
            dist.all_reduce(t, op=op)
            assert (t == want).all(), (dt, op, t)
        if dt.is_floating_point:
            t = torch.full((4,), r + 1, dtype=dt)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            assert (t == (n + 1) / 2).all(), (dt, t)
        # non-contiguous: a strided view of a bigger tensor; the other columns stay as they are
        base = torch.zeros(4, 6, dtype=dt)
        view = base[:, ::2]
        view.copy_(torch.arange(12).reshape(4, 3).to(dt) + r)
        dist.all_reduce(view)
        want = (torch.arange(12).reshape(4, 3) * n + n * (n - 1) // 2).to(dt)
        assert torch.equal(base[:, ::2], want) and (base[:, 1::2] == 0).all(), (dt, base)
        # broadcast from the other node's last rank, into a transposed (non-contiguous) view
        t = (torch.arange(6).reshape(2, 3).to(dt) + r * 10).t()
        dist.broadcast(t, src=n - 1)
        assert torch.equal(t, (torch.arange(6).reshape(2, 3).to(dt) + (n - 1) * 10).t()), (dt, t)
        # all_gather into a list (one non-contiguous output), and into one tensor
        outs = [torch.zeros(2, 3, dtype=dt) for _ in range(n)]
        outs[1] = torch.zeros(3, 2, dtype=dt).t()
        dist.all_gather(outs, torch.full((3, 2), r, dtype=dt).t())
        assert all((o == i).all() and o.shape == (2, 3) for i, o in enumerate(outs)), (dt, outs)
        flat = torch.zeros(n * 4, dtype=dt)
        dist.all_gather_into_tensor(flat, torch.full((4,), r, dtype=dt))
        assert torch.equal(flat, torch.arange(n).repeat_interleave(4).to(dt)), (dt, flat)
        # reduce_scatter: rank i gets the sum over ranks of their i-th input
        ins = [torch.full((3,), 10 * i + r, dtype=dt) for i in range(n)]
        out = torch.zeros(3, dtype=dt)
        dist.reduce_scatter(out, ins)
        assert (out == 10 * r * n + n * (n - 1) // 2).all(), (dt, out)
        big = torch.arange(2 * n).to(dt) + r
        out = torch.zeros(2, dtype=dt)
        dist.reduce_scatter_tensor(out, big)
        assert torch.equal(out, (torch.arange(2 * r, 2 * r + 2) * n + n * (n - 1) // 2).to(dt)), (dt, out)
        # empty tensors
        e = torch.empty(0, dtype=dt)
        dist.all_reduce(e)
        dist.broadcast(e, src=0)
        eo = [torch.empty(0, dtype=dt) for _ in range(n)]
        dist.all_gather(eo, e)
        assert e.numel() == 0 and all(o.numel() == 0 for o in eo)
    # dtypes libtrain reduces through int32 copies, and data movement of any dtype
    t = torch.full((3,), 100 + r, dtype=torch.int8)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert (t == 100 + n - 1).all(), t
    t = torch.tensor([r == 1, False, True])
    dist.all_reduce(t)
    assert t.tolist() == [True, False, True], t
    c = torch.full((2,), complex(r, -r))
    dist.broadcast(c, src=2)
    assert (c == complex(2, -2)).all(), c
    dist.barrier()

    # async_op: several in flight, waited in reverse order; the future carries the tensors
    ts = [torch.full((1000,), float(r + i)) for i in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    works.append(dist.broadcast(torch.zeros(3), src=1, async_op=True))
    works.append(dist.barrier(async_op=True))
    for w in reversed(works):
        assert w.wait() is True
        assert w.is_completed()
    for i, t in enumerate(ts):
        assert (t == tri - n + n * i).all(), (i, t[:3])
    t = torch.ones(5)
    fut = dist.all_reduce(t, async_op=True).get_future()
    got = fut.wait()
    assert got[0] is t and (t == n).all(), (got, t)
    gl = [torch.zeros(2) for _ in range(n)]
    w = dist.all_gather(gl, torch.full((2,), float(r)), async_op=True)
    w.wait()
    assert [int(g[0]) for g in gl] == list(range(n))

    # reduce, gather, scatter, all_to_all
    t = torch.full((4,), float(r + 1))
    dist.reduce(t, dst=2)
    assert (t == (tri if r == 2 else r + 1)).all(), t
    gl = [torch.zeros(2, dtype=torch.int64) for _ in range(n)] if r == 1 else None
    dist.gather(torch.full((2,), r * 3, dtype=torch.int64), gl, dst=1)
    if r == 1:
        assert [int(g[0]) for g in gl] == [3 * i for i in range(n)], gl
    sl = [torch.full((3,), float(i * 7)) for i in range(n)] if r == 3 else None
    out = torch.zeros(3)
    dist.scatter(out, sl, src=3)
    assert (out == r * 7).all(), out
    inp = torch.arange(n * 2, dtype=torch.float64) + 100 * r
    out = torch.empty(n * 2, dtype=torch.float64)
    dist.all_to_all_single(out, inp)
    assert out.tolist() == [100 * s + 2 * r + k for s in range(n) for k in range(2)], out
    # uneven: rank s sends s + 1 rows of 2 to every rank j
    inp = torch.full(((r + 1) * n, 2), float(r), dtype=torch.float32)
    out = torch.empty((sum(s + 1 for s in range(n)), 2))
    dist.all_to_all_single(out, inp, output_split_sizes=[s + 1 for s in range(n)],
                           input_split_sizes=[r + 1] * n)
    assert out[:, 0].tolist() == [float(s) for s in range(n) for _ in range(s + 1)], out
    outs = [torch.zeros(j + 1, dtype=torch.int64) for j in range(n)]
    dist.all_to_all(outs, [torch.full((r + 1,), 10 * r + j, dtype=torch.int64) for j in range(n)])
    assert [o.tolist() for o in outs] == [[10 * j + r] * (j + 1) for j in range(n)], outs

    # objects (uint8 tensors under the hood), and groups with their own communicators
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r})
    assert objs == [{"rank": i} for i in range(n)], objs
    lst = [("hello", r)]
    dist.broadcast_object_list(lst, src=3)
    assert lst == [("hello", 3)], lst
    evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])
    mine = evens if r % 2 == 0 else odds
    t = torch.tensor([float(r)])
    dist.all_reduce(t, group=mine)
    assert t.item() == (2.0 if r % 2 == 0 else 4.0), t
    dist.broadcast(t, src=3 if r % 2 else 2, group=mine)
    assert t.item() == (2.0 if r % 2 == 0 else 4.0), t
    dist.all_reduce(t)  # the default group still works after the others
    assert t.item() == 12.0, t

    # unsupported op: a clear error before anything is sent, on every rank
    e = expect_raise(lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.PRODUCT), ValueError, "PRODUCT")
    assert "PRODUCT" in str(e), e
    dist.barrier()


def train(steps, die_rank=None):
    """DDP on the rank's slice of a batch; returns the model. Ranks start from different weights
    (DDP's broadcast must make them rank 0's)."""
    torch.manual_seed(r)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(123)
    for step in range(steps):
        x = torch.randn(4 * n, 8, generator=g)
        y = torch.randn(4 * n, 3, generator=g)
        if step == 2 and r == die_rank:
            os._exit(3)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x[4 * r:4 * r + 4]), y[4 * r:4 * r + 4]).backward()
        opt.step()
    return model


def reference(steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(123)
    for _ in range(steps):
        x, y = torch.randn(4 * n, 8, generator=g), torch.randn(4 * n, 3, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def check_ddp():
    model = train(6)
    ref = reference(6)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (name, (p - q).abs().max())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    with open(os.path.join(out_dir, f"weights.{r}"), "wb") as f:
        f.write(flat.numpy().tobytes())  # the driver checks they are equal bytes on all ranks


if scenario == "collectives":
    check_collectives()
    check_ddp()
elif scenario == "gloo":
    check_ddp()
elif scenario == "mismatch":
    e = expect_raise(lambda: dist.all_reduce(torch.ones(10 + r)), libtrain.Error, "mismatch")
    print(f"rank {r}: mismatch raised {type(e).__name__}: {e}", flush=True)
elif scenario == "leave_early":
    # Exit while the group's thread still completes works: it must finish before the interpreter
    # does (it aborted, "terminate called without an active exception", after a good job).
    works = [dist.all_reduce(torch.ones(1 << 22), async_op=True) for _ in range(10)]
    sys.exit(0)
elif scenario == "exit":
    start = time.monotonic()
    try:
        train(50, die_rank=1)
        raise AssertionError("training went on with a rank gone")
    except AssertionError:
        raise
    except Exception as e:
        took = time.monotonic() - start
        print(f"rank {r}: raised after {took:.1f} s: {type(e).__name__}: {str(e)[:200]}", flush=True)
        assert took < float(os.environ["LIBTRAIN_TIMEOUT"]) + 5, took
        os._exit(0)  # leave at once: the group cannot be shut down cleanly without rank 1
print(f"rank {r}: {scenario} ok", flush=True)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(scenario, nranks, tmp, deadline=60):
    """Runs the scenario on nranks local ranks (2 fake nodes); returns their exit codes."""
    port = free_port()
    out_dir = os.path.join(tmp, scenario)
    os.makedirs(out_dir)
    procs = []
    for r in range(nranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(nranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), LIBTRAIN_TIMEOUT=str(TIMEOUT),
                   LIBTRAIN_NODE=f"fake-node-{r * 2 // nranks}", OMP_NUM_THREADS="1")
        env.pop("LIBTRAIN_BOOTSTRAP", None)
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_CODE, scenario, out_dir], env=env))
    start = time.monotonic()
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1, deadline - (time.monotonic() - start))))
        except subprocess.TimeoutExpired:
            codes.append("hung")
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    print(f"{scenario}: exit codes {codes} in {time.monotonic() - start:.1f} s", flush=True)
    return codes, out_dir


def same_weights(out_dir, nranks):
    blobs = []
    for r in range(nranks):
        with open(os.path.join(out_dir, f"weights.{r}"), "rb") as f:
            blobs.append(f.read())
    ok = len(blobs[0]) > 0 and all(b == blobs[0] for b in blobs)
    print(f"  weights bitwise identical on all {nranks} ranks: {ok}")
    return ok


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="libtrain-pg-") as tmp:
        codes, out = run("collectives", 4, tmp)
        if codes != [0] * 4 or not same_weights(out, 4):
            failures.append("collectives/DDP on libtrain")
        codes, out = run("gloo", 2, tmp)
        if codes != [0] * 2 or not same_weights(out, 2):
            failures.append("DDP on gloo")
        codes, _ = run("mismatch", 4, tmp, deadline=TIMEOUT + 30)
        if codes != [0] * 4:
            failures.append("mismatch")
        codes, _ = run("leave_early", 2, tmp)
        if codes != [0, 0]:
            failures.append("exit with works in flight")
        codes, _ = run("exit", 4, tmp, deadline=TIMEOUT + 30)
        if codes != [0, 3, 0, 0]:
            failures.append("a rank exiting mid-training")
    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
