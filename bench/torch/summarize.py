# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Summarises a bench/torch run (run.bash --out DIR): per shape, model and mode the median step
# time over rounds (and its range), the compute-only time, the exposed communication, and the
# step-time ratios to DDP+Gloo of the same round; then the targets. Re-runnable:
#   python3 bench/torch/summarize.py DIR
import glob
import json
import os
import statistics
import sys
from collections import defaultdict

MODE_LABEL = {"gloo": "DDP+Gloo", "libtrain": "DDP+libtrain", "hvd": "libtrain.torch"}
REFERENCE_LABEL = {"compute": "compute", "ddp-free": "DDP free"}  # step_bench.py's reference copies
LABEL = {**MODE_LABEL, **REFERENCE_LABEL}
MODEL_LABEL = {"mlp": "MLP 25.2M", "resnet18": "ResNet-18"}
TARGET = {"mlp": 1 / 1.5, "resnet18": 1.0}  # largest step-time ratio to DDP+Gloo that meets it


def load(out):
    """(round, shape, model) -> the per-rank records of that srun; and the sruns that failed."""
    runs, failed = {}, []
    for path in sorted(glob.glob(os.path.join(out, "raw", "r*.err"))):  # one per srun
        r, shape, model = os.path.basename(path)[:-4].split(".")
        recs = [json.load(open(p)) for p in glob.glob(f"{path[:-4]}.rank*.json")]
        nodes, tasks = (int(v) for v in shape.split("x"))
        if len(recs) != nodes * tasks:
            failed.append(f"{r}.{shape}.{model}")
            continue
        runs[(int(r[1:]), shape, model)] = recs
    return runs, failed


def per_step_max(recs, mode):
    """Median over the timed steps of the slowest rank's duration of that step: a synchronous
    step lasts as long as its slowest rank (for the compute-only steps: what a step with free
    communication would take)."""
    return statistics.median(max(s) for s in zip(*(rec["steps"][mode] for rec in recs)))


def trace_row(steps):
    """Where one mode's step goes (run.bash --trace), ms from the step's start, medians over
    steps: forward end, backward end, step end; first and last bucket handed to the backend
    (DDP's hook, libtrain.torch's launch); last bucket reduced (the future completed, or the wait
    in step() over); the tail (last reduced - last handed over: communication nothing overlaps);
    the wait in step(); the backend's completion latency (collective over -> future completed)."""
    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    def times(step, *kinds):
        return [t for k, _, t in step["events"] if k in kinds]

    def last(values):
        return max(values) if values else None

    rows = {"forward": med(s["fwd"] for s in steps), "backward": med(s["bwd"] for s in steps),
            "step": med(s["end"] for s in steps)}
    handed = [times(s, "ready", "launch") for s in steps]
    reduced = [times(s, "done", "waited") for s in steps]
    rows["first bucket"] = med(min(h) if h else None for h in handed)
    rows["last bucket"] = med(last(h) for h in handed)
    rows["last reduced"] = med(last(r) for r in reduced)
    rows["tail"] = med(last(r) - last(h) if h and r else None for h, r in zip(handed, reduced))
    waits = []
    for s in steps:  # each blocking "wait" ends at the next "waited"
        total, start = 0.0, None
        for k, _, t in s["events"]:
            if k == "wait":
                start = t
            elif k == "waited" and start is not None:
                total, start = total + t - start, None
        waits.append(total)
    rows["wait in step()"] = med(waits) if any(times(s, "launch") for s in steps) else None
    lag = [d - c for s in steps for c, d in zip(times(s, "collective-end"), times(s, "resolve"))]
    rows["completion lag"] = med(lag)
    return rows


def print_trace(runs, models, shapes):
    print("\nwhere the time goes (--trace), ms from the step's start, median over ranks, steps and rounds; "
          "DDP modes through a comm hook that does what DDP's default does:")
    cols = ["forward", "backward", "step", "first bucket", "last bucket", "last reduced", "tail",
            "wait in step()", "completion lag"]
    print("| model | shape | mode | " + " | ".join(cols) + " |")
    print("|---|---|---|" + "---:|" * len(cols))
    for model in models:
        for shape in shapes:
            mine = [rec for (r, sh, m), v in sorted(runs.items()) if sh == shape and m == model
                    for rec in v if "trace" in rec]
            for mode in list(REFERENCE_LABEL) + list(MODE_LABEL):
                steps = [s for rec in mine for s in rec["trace"].get(mode, [])]
                if not steps:
                    continue
                row = trace_row(steps)
                cells = ["" if row[c] is None else f"{row[c]:.1f}" for c in cols]
                print(f"| {MODEL_LABEL[model]} | {shape} | {LABEL[mode]} | " + " | ".join(cells) + " |")


def main():
    out = sys.argv[1]
    runs, failed = load(out)
    if not runs:
        sys.exit(f"summarize: no complete srun under {out}/raw ({len(failed)} incomplete: see their .err files)")
    # (round, shape, model, mode) -> (step, compute, exposed, ddp-free or None) in seconds
    fig = {}
    diverged = []
    for (r, shape, model), recs in runs.items():
        compute = per_step_max(recs, "compute")
        free = per_step_max(recs, "ddp-free") if "ddp-free" in recs[0]["steps"] else None
        for mode in MODE_LABEL:
            if mode in recs[0]["steps"]:
                step = per_step_max(recs, mode)
                fig[(r, shape, model, mode)] = (step, compute, step - compute, free)
                if len({rec["checksum"][mode] for rec in recs}) != 1:
                    diverged.append(f"r{r}.{shape}.{model}.{mode}")
    shapes = sorted({k[1] for k in fig}, key=lambda s: (int(s.split("x")[0]) * int(s.split("x")[1]), s))
    models = [m for m in MODEL_LABEL if any(k[2] == m for k in fig)]
    modes = [m for m in MODE_LABEL if any(k[3] == m for k in fig)]
    rounds = sorted({k[0] for k in fig})

    recs = [rec for v in runs.values() for rec in v]
    for key in ("torch", "blas", "threads"):
        print(f"{key}: {', '.join(sorted({str(rec.get(key, '?')) for rec in recs}))}")
    for model in models:
        one = next(rec for rec in recs if rec["model"] == model)
        nsteps = len(one["steps"]["compute"])
        print(f"{model}: {one['params'] / 1e6:.1f} M parameters, batch {one['batch']} per rank, "
              f"{nsteps} timed steps per mode and round")
    print(f"\nrounds: {len(rounds)}; ms per step, median over rounds (range in brackets). compute = "
          "compute-only step; exposed = step - compute; ratio = step / DDP+Gloo's step in the same "
          "round, median over rounds (worst round in brackets); speed-up = 1 / ratio; bound = DDP+Gloo's "
          "step / compute: the speed-up over DDP+Gloo of a mode whose communication cost nothing; DDP free = "
          "DDP with a communication hook that communicates nothing (its bucket copies, division and "
          "hooks only), and its bound = DDP+Gloo's step / that: the most any DDP backend can gain\n")
    print("| model | shape | mode | step ms | compute ms | DDP free ms | exposed comm ms | ratio to DDP+Gloo "
          "| speed-up | bound (DDP bound) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    verdicts = []
    for model in models:
        for shape in shapes:
            for mode in modes:
                mine = [(r, fig[(r, shape, model, mode)]) for r in rounds if (r, shape, model, mode) in fig]
                if not mine:
                    continue
                step = [f[0] * 1e3 for _, f in mine]
                comp = [f[1] * 1e3 for _, f in mine]
                expo = [f[2] * 1e3 for _, f in mine]
                free = [f[3] * 1e3 for _, f in mine if f[3] is not None]
                free_s = f"{statistics.median(free):.0f}" if free else ""
                ratios = [f[0] / fig[(r, shape, model, "gloo")][0] for r, f in mine
                          if (r, shape, model, "gloo") in fig]
                ratio_s = speed_s = bound_s = ""
                if mode == "gloo":
                    # The speed-up a mode whose communication cost nothing would reach.
                    bound_s = f"{statistics.median(f[0] / f[1] for _, f in mine):.2f}x"
                    if free:
                        bound_s += f" ({statistics.median(f[0] / f[3] for _, f in mine):.2f}x)"
                elif ratios:
                    med, worst = statistics.median(ratios), max(ratios)
                    ratio_s, speed_s = f"{med:.2f} ({worst:.2f})", f"{1 / med:.2f}x"
                    # The best ratio this mode could reach here: its communication free.
                    floor = [(f[3] if mode != "hvd" and f[3] is not None else f[1]) / fig[(r, shape, model, "gloo")][0]
                             for r, f in mine if (r, shape, model, "gloo") in fig]
                    verdicts.append((model, shape, mode, med, worst, med <= TARGET[model] + 1e-9,
                                     statistics.median(floor)))
                print(f"| {MODEL_LABEL[model]} | {shape} | {MODE_LABEL[mode]} | {statistics.median(step):.0f} "
                      f"({min(step):.0f}-{max(step):.0f}) | {statistics.median(comp):.0f} | {free_s} | "
                      f"{statistics.median(expo):.0f} | {ratio_s} | {speed_s} | {bound_s} |")

    alone = [(k, recs) for k, recs in sorted(runs.items()) if "allreduce-gloo" in recs[0]["steps"]]
    if alone:
        print("\nthe gradients' allreduce alone (no compute; 25 MB pieces), ms, median over rounds:")
        for model in models:
            for shape in shapes:
                mine = [recs for (r, sh, m), recs in alone if sh == shape and m == model]
                if not mine:
                    continue
                row = {mode: statistics.median(per_step_max(recs, "allreduce-" + mode) * 1e3 for recs in mine)
                       for mode in ("gloo", "libtrain") if "allreduce-" + mode in mine[0][0]["steps"]}
                extra = f" (Gloo / libtrain {row['gloo'] / row['libtrain']:.2f}x)" if len(row) == 2 else ""
                print(f"  {MODEL_LABEL[model]} {shape}: " + ", ".join(f"{MODE_LABEL[k]} {v:.0f}" for k, v in row.items()) + extra)

    if "cpu_ms" in recs[0]:
        print("\nCPU time per step and rank (all the process's threads), ms, median over ranks and rounds:")
        for model in models:
            for shape in shapes:
                mine = [rec for (r, sh, m), v in runs.items() if sh == shape and m == model for rec in v]
                if mine:
                    keys = [k for k in list(REFERENCE_LABEL) + modes + ["allreduce-gloo", "allreduce-libtrain"]
                            if k in mine[0]["cpu_ms"]]
                    print(f"  {MODEL_LABEL[model]} {shape}: " + ", ".join(
                        f"{LABEL.get(k, k)} {statistics.median(rec['cpu_ms'][k] for rec in mine):.0f}" for k in keys))

    print("\nmedian phase times per rank, ms (forward / backward / optimizer step), first round:")
    for (r, shape, model), recs in sorted(runs.items()):
        if r != rounds[0]:
            continue
        row = "; ".join(f"{m}: " + " / ".join(f"{statistics.median(rec['phases_ms'][m][i] for rec in recs):.0f}"
                                                for i in range(3))
                        for m in list(REFERENCE_LABEL) + modes if m in recs[0]["phases_ms"])
        print(f"  {model} {shape}: {row}")

    if any("trace" in rec for rec in recs):
        print_trace(runs, models, shapes)

    print()
    for model in models:
        mine = [v for v in verdicts if v[0] == model]
        if not mine:
            continue
        want = "at least 1.5x faster than" if model == "mlp" else "never slower than"
        met = all(v[5] for v in mine)
        print(f"target: {MODEL_LABEL[model]}: DDP+libtrain and libtrain.torch {want} DDP+Gloo on every "
              f"multi-rank shape (median ratio <= {TARGET[model]:.2f}): {'MET' if met else 'MISSED'}")
        for v in mine:
            if not v[5]:
                why = (f"; with free communication it would read {v[6]:.2f}"
                       f"{', so no backend meets it here' if v[6] > TARGET[model] + 1e-9 else ''}")
                print(f"    missed: {v[1]} {MODE_LABEL[v[2]]}: ratio {v[3]:.2f} (worst round {v[4]:.2f}){why}")
    if failed:
        print("failed runs (fewer ranks reported than the shape has): " + ", ".join(failed))
    if diverged:
        print("runs whose ranks ended with different weights: " + ", ".join(diverged))


if __name__ == "__main__":
    main()
