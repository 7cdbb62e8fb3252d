# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Per-rank body of bench/torch: times the training steps of one model (a 25 M-parameter MLP or
# ResNet-18) under each data-parallel mode asked for (DDP on Gloo, DDP on the "libtrain" backend,
# libtrain.torch's DistributedOptimizer) and the same rank's compute-only steps, all in one
# process, interleaved block by block so that the shared machine's load hits every mode alike;
# writes one JSON record per rank (--out PATH, %r = rank). Run by bench/torch/run.bash under srun.
import argparse
import copy
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

MODES = ("gloo", "libtrain", "hvd")


def parse_args():
    p = argparse.ArgumentParser(description="one rank of bench/torch (see README.md)")
    p.add_argument("--model", choices=("mlp", "resnet18"), required=True)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    p.add_argument("--batch", type=int, default=0, help="per-rank batch (default: 8 mlp, 16 resnet18)")
    p.add_argument("--image-size", type=int, default=32, help="resnet18 input is 3 x S x S")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps of every mode first")
    p.add_argument("--blocks", type=int, default=4, help="blocks; each runs every mode in turn")
    p.add_argument("--block-steps", type=int, default=4, help="timed steps per mode and block")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--comm-only", action="store_true",
                   help="also time, in every block, allreduces of the gradients' size alone (no compute) "
                        "in 25 MB pieces on each DDP mode's group: the wire time without CPU contention")
    p.add_argument("--trace", action="store_true",
                   help="record a timeline of every timed step (phases; DDP buckets ready and reduced, "
                        "through a comm hook that does what DDP's default does; libtrain.torch's bucket "
                        "launches and waits) into the record: where the time goes (summarize.py)")
    p.add_argument("--tag", default="", help="copied into the record")
    p.add_argument("--out", default="", help="the record's file, %%r replaced by the rank (default: stdout)")
    args = p.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.modes or any(m not in MODES for m in args.modes):
        p.error(f"--modes: each of {', '.join(MODES)}")
    if not args.batch:
        args.batch = 8 if args.model == "mlp" else 16
    return args


def make_model(args):
    if args.model == "mlp":
        # 1024 -> 4096 -> 4096 -> 1024 -> 10: 25.2 M parameters, 101 MB of fp32 gradients.
        return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                             nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 10))
    import torchvision
    return torchvision.models.resnet18(num_classes=10)  # 11.2 M parameters


def make_batch(args, rank):
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own synthetic shard
    if args.model == "mlp":
        x = torch.randn(args.batch, 1024, generator=g)
    else:
        x = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g)
    return x, torch.randint(0, 10, (args.batch,), generator=g)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


class Tracer:
    """--trace: per timed step, the phases and the communication events (perf_counter seconds,
    kept relative to the step's start). `events` collects (kind, bucket, time) tuples while a
    step runs; hooks from other threads append to it too (list.append is atomic)."""

    def __init__(self):
        self.on, self.events, self.steps = False, [], {}

    def now(self, kind, bucket=-1):
        if self.on:
            self.events.append((kind, bucket, time.perf_counter()))

    def step(self, mode, t0, t1, t2, t3):
        if self.on:
            ev = [(k, b, round(1e3 * (t - t0), 3)) for k, b, t in self.events]
            self.steps.setdefault(mode, []).append(
                {"fwd": round(1e3 * (t1 - t0), 3), "bwd": round(1e3 * (t2 - t0), 3),
                 "end": round(1e3 * (t3 - t0), 3), "events": ev})
        self.events = []


TRACER = Tracer()


def traced_hook(group, size, name):
    """A DDP communication hook doing what DDP's default does (divide the bucket by the world
    size, allreduce it on the group) that records when each bucket is ready and when its
    allreduce's future completes."""
    def hook(state, bucket):
        index = bucket.index()
        TRACER.now("ready", index)
        fut = dist.all_reduce(bucket.buffer().div_(size), group=group, async_op=True).get_future()

        def done(f):
            TRACER.now("done", index)
            return f.value()[0]
        return fut.then(done)
    return hook


def trace_libtrain():
    """Records, in the libtrain backend, when the completion thread sees a collective finished
    and when it completes the work's future; in libtrain.torch, when a bucket's allreduce is
    launched and how long step() waits for it."""
    from libtrain.torch import _backend, _ops
    complete, resolve = _backend._Work._complete, _backend._Work._resolve

    def traced_complete(work):
        complete(work)
        TRACER.now("collective-end")

    def traced_resolve(work):
        TRACER.now("resolve")
        resolve(work)
    _backend._Work._complete, _backend._Work._resolve = traced_complete, traced_resolve
    start = _ops.start_allreduce

    class Traced:
        def __init__(self, handle):
            self.handle = handle

        def wait(self):
            TRACER.now("wait-done-already" if self.handle.is_done() else "wait")
            self.handle.wait()
            TRACER.now("waited")

        def is_done(self):
            return self.handle.is_done()

    def traced_start(buf, op, name, comm=None):
        TRACER.now("launch")
        return Traced(start(buf, op, name, comm))
    _ops.start_allreduce = traced_start


def run_steps(net, opt, x, y, n, times, phases, cpu, mode=""):
    """n training steps; appends each one's duration to `times`, its (forward, backward,
    optimizer step) durations to `phases` (where DDP waits in backward, the
    DistributedOptimizer in step()), and the CPU time all of this process's threads used to `cpu`
    (communication threads, spinning waiters and copies included)."""
    for _ in range(n):
        TRACER.events = []
        c0 = time.process_time()
        t0 = time.perf_counter()
        opt.zero_grad()  # 1.13: zeroes in place (set_to_none=False), as most scripts do
        loss = F.cross_entropy(net(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        times.append(t3 - t0)
        phases.append((t1 - t0, t2 - t1, t3 - t2))
        TRACER.step(mode, t0, t1, t2, t3)
        cpu.append(time.process_time() - c0)


def no_communication_hook(size, bucket):
    """A DDP communication hook that does what the default one does to the bucket (divide by the
    world size) but communicates nothing: the "ddp-free" reference."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer().div_(size))
    return fut


def blas_library():
    """The BLAS this process loaded (Debian's python3-torch takes whichever libblas.so.3 the
    alternatives point at: the reference BLAS unless an optimised one is installed)."""
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if "blas" in os.path.basename(path):
            return os.path.realpath(path)
    return "none"


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)

    # DDP's groups: Gloo is the default group (env://: the plugin's RANK, WORLD_SIZE, MASTER_ADDR,
    # MASTER_PORT) and libtrain a second group over the same store, or the default when alone.
    t0 = time.perf_counter()
    groups = {}
    ddp_modes = [m for m in args.modes if m != "hvd"]
    if ddp_modes:
        if "libtrain" in ddp_modes:
            import libtrain.torch  # noqa: F401  registers the "libtrain" torch.distributed backend
        dist.init_process_group(ddp_modes[0])
        groups[ddp_modes[0]] = None  # the default group
        for m in ddp_modes[1:]:
            groups[m] = dist.new_group(backend=m)
    if "hvd" in args.modes:
        import libtrain.torch as hvd
        hvd.init()  # PMIx under srun --mpi=pmix
    t_init = time.perf_counter() - t0
    if ddp_modes:
        rank, size, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
    else:
        rank, size, barrier = hvd.rank(), hvd.size(), hvd.barrier

    base = make_model(args)
    nparams = sum(p.numel() for p in base.parameters())
    x, y = make_batch(args, rank)
    # mode -> (model, net, optimizer). Two references beside the modes: "compute", the same model
    # without communication, and "ddp-free" (with any DDP mode), DDP itself with a communication
    # hook that communicates nothing: DDP's own work (bucket copies, division, hooks) at zero
    # communication cost, the floor under any DDP backend's step.
    runs = {}
    references = ["compute"] + (["ddp-free"] if ddp_modes else [])
    for mode in args.modes + references:
        model = copy.deepcopy(base)
        if mode == "hvd":
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            opt = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                           named_parameters=model.named_parameters())
            hvd.broadcast_optimizer_state(opt, root_rank=0)
            net = model
        elif mode == "compute":
            net, opt = model, make_optimizer(model.parameters())
        elif mode == "ddp-free":
            net = nn.parallel.DistributedDataParallel(model, process_group=groups[ddp_modes[0]],
                                                      broadcast_buffers=False)
            net.register_comm_hook(size, no_communication_hook)
            opt = make_optimizer(net.parameters())
        else:
            net = nn.parallel.DistributedDataParallel(model, process_group=groups[mode])
            if args.trace:
                net.register_comm_hook(None, traced_hook(groups[mode], size, mode))
            opt = make_optimizer(net.parameters())
        runs[mode] = (model, net, opt)

    if args.trace and ("libtrain" in args.modes or "hvd" in args.modes):
        trace_libtrain()
    order = list(runs)
    times = {m: [] for m in order}
    phases = {m: [] for m in order}
    cpu = {m: [] for m in order}
    if args.comm_only:  # "allreduce-gloo" etc.: the gradients' bytes, in DDP's 25 MB pieces, nothing else
        flat = torch.zeros(nparams)
        pieces = list(torch.split(flat, (25 << 20) // 4))
        for mode in ddp_modes:
            order.append("allreduce-" + mode)
            times[order[-1]], phases[order[-1]], cpu[order[-1]] = [], [], []

    def run(mode, n, t, ph, c):
        if mode.startswith("allreduce-"):
            group = groups[mode[len("allreduce-"):]]
            for _ in range(n):
                t0, c0 = time.perf_counter(), time.process_time()
                for piece in pieces:
                    dist.all_reduce(piece, group=group)
                t.append(time.perf_counter() - t0)
                ph.append((0.0, t[-1], 0.0))
                c.append(time.process_time() - c0)
        else:
            run_steps(runs[mode][1], runs[mode][2], x, y, n, t, ph, c, mode)
    for mode in order:  # warm-up: DDP rebuilds its buckets after the first step, hooks register...
        barrier()
        run(mode, args.warmup, [], [], [])
    for b in range(args.blocks):
        for k in range(len(order)):
            mode = order[(k + b) % len(order)]  # the order turns every block
            barrier()  # every rank starts the block together (compute-only steps included)
            TRACER.on = args.trace
            run(mode, args.block_steps, times[mode], phases[mode], cpu[mode])
            TRACER.on = False
    barrier()

    # Same weights on every rank, or the communication did not happen: summarize.py compares.
    with torch.no_grad():
        checksum = {m: float(sum(p.double().sum() for p in runs[m][0].parameters())) for m in args.modes}
    rec = {"tag": args.tag, "model": args.model, "rank": rank, "size": size,
           "host": socket.gethostname(), "threads": args.threads, "batch": args.batch,
           "params": nparams, "init_s": t_init, "steps": times,
           "phases_ms": {m: [round(1e3 * statistics.median(v), 1) for v in zip(*ph)] for m, ph in phases.items()},
           "cpu_ms": {m: round(1e3 * statistics.median(v), 1) for m, v in cpu.items()},
           "checksum": checksum, "torch": torch.__version__, "blas": blas_library()}
    if args.trace:
        rec["trace"] = TRACER.steps
    # A file per rank: srun forwards the ranks' stdout in chunks that can interleave mid-line.
    if args.out:
        path = args.out.replace("%r", str(rank))
        with open(path + ".tmp", "w") as f:
            json.dump(rec, f)
        os.replace(path + ".tmp", path)
    else:
        print(json.dumps(rec), flush=True)
    barrier()  # every rank has written before any leaves (a rank that dies at exit ends the step)

    if ddp_modes:
        dist.destroy_process_group()
    if "hvd" in args.modes:
        hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
