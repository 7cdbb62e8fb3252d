#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""bench/scale/model.py: from the per-node costs bench/scale/run.bash measured on the sandbox to
100 and 1,000 nodes (issue 15, item 5). Prints, per mode, the origin registry's bytes per job start
and the time until every node runs its task, for an image of --image-gb (15 GB by default).

    bench/scale/model.py MEASURED.tsv [--nodes 100 1000] [--image-gb 15] [assumption flags]

A model, not a measurement: every number it does not read from MEASURED.tsv is an assumption,
printed with the result and settable by a flag (defaults: a 2026 HPC cluster).

What it reads from the measurements (1-node rows, cold unless said):
  * per-node import rate: the image's unpacked bytes / (pull, cold, first task), which covers
    download and unpack on one node here (2 vCPUs, tmpfs): the CPU-bound part scales with the
    image, and we do not assume real nodes are faster (they are: more cores);
  * start overheads that do not grow with the image: warm starts (pull, shared), and a squashfs
    cold start (mount + reading the config), taken at the largest measured node count;
  * the cold pull-through mirror's duplication: origin blob GETs / blobs per image, at the largest
    measured node count (docker-registry's proxy does not merge concurrent fetches).

The modes, for N nodes and an image of C bytes compressed, U unpacked:
  pull     every node downloads C from the origin (shared uplink) and unpacks U:
           T = max(N*C / origin_bw, U / node_rate) + start
  mirror   the origin sends C*dup (dup = 1 for a mirror that merges fetches, as Harbor or Zot;
           --mirror-dup to use the measured docker-registry factor); nodes fetch from the mirror:
           T = max(C*dup / origin_bw, N*C / mirror_bw, U / node_rate) + start
  shared   one node downloads and unpacks into the shared filesystem, the others wait on its lock
           and then start from the published tree, reading their working set from it:
           T = max(C / origin_bw, U / min(node_rate, fs_write_bw)) + start_shared
               + N*W*U / fs_read_bw            (W: fraction of the image a task reads to start)
  squashfs the file was prepared once, off the job's critical path; every node mounts it:
           T = start_squashfs + N*W*C / fs_read_bw   (reads are compressed bytes)
"""
import argparse
import csv
import sys


def load(path):
    rows = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f, delimiter="\t"):
            if r["nodes"] == "nodes":  # the header again: runs appended to one file
                continue
            rows[(r["mode"], int(r["nodes"]), r["state"])] = r
    return rows


def pick(rows, mode, state, field, largest=True):
    """FIELD of MODE/STATE at the largest (or smallest) measured node count, and that count."""
    counts = sorted(n for (m, n, s) in rows if m == mode and s == state)
    if not counts:
        return None, None
    n = counts[-1] if largest else counts[0]
    return float(rows[(mode, n, state)][field]), n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("measured")
    p.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--image-gb", type=float, default=15.0, help="unpacked image size (GB)")
    p.add_argument("--measured-unpacked-gb", type=float, default=1.02,
                   help="unpacked size of the measured image (torch: 1.02 GB)")
    p.add_argument("--origin-gbit", type=float, default=10.0, help="registry uplink (Gb/s)")
    p.add_argument("--mirror-gbit", type=float, default=100.0, help="site mirror bandwidth (Gb/s)")
    p.add_argument("--fs-read-gbyte", type=float, default=100.0,
                   help="shared filesystem aggregate read bandwidth (GB/s)")
    p.add_argument("--fs-write-gbyte", type=float, default=2.0,
                   help="shared filesystem write bandwidth of one client (GB/s)")
    p.add_argument("--working-set", type=float, default=0.2,
                   help="fraction of the image a task reads before it runs its own work")
    p.add_argument("--mirror-dup", action="store_true",
                   help="use the measured cold docker-registry duplication instead of 1")
    a = p.parse_args()
    rows = load(a.measured)

    t1, _ = pick(rows, "pull", "cold", "first_s", largest=False)
    bytes1, _ = pick(rows, "pull", "cold", "origin_blob_bytes", largest=False)
    gets1, _ = pick(rows, "pull", "cold", "origin_blob_gets", largest=False)
    if t1 is None:
        sys.exit("model: no 'pull cold' row in the measurements")
    measured_u = a.measured_unpacked_gb * 1e9
    ratio = measured_u / bytes1                      # unpacked / compressed, of the measured image
    node_rate = measured_u / t1                      # bytes unpacked per second, download included
    start_pull, _ = pick(rows, "pull", "warm", "last_s")
    start_shared, n_sh = pick(rows, "shared", "warm", "last_s")
    start_sq, n_sq = pick(rows, "squashfs", "cold", "last_s")
    mgets, n_m = pick(rows, "mirror", "cold", "origin_blob_gets")
    dup = (mgets / gets1) if (mgets is not None and a.mirror_dup) else 1.0

    U = a.image_gb * 1e9
    C = U / ratio
    origin_bw = a.origin_gbit / 8 * 1e9
    mirror_bw = a.mirror_gbit / 8 * 1e9
    fs_read = a.fs_read_gbyte * 1e9
    fs_write = a.fs_write_gbyte * 1e9
    W = a.working_set

    print("measured (sandbox): per-node import %.0f MB/s unpacked; image ratio %.2f; starts: "
          "pull warm %.2f s, shared warm %.2f s (N=%s), squashfs cold %.2f s (N=%s); cold "
          "docker-registry mirror: %.1fx the image from the origin at N=%s"
          % (node_rate / 1e6, ratio, start_pull or 0, start_shared or 0, n_sh, start_sq or 0, n_sq,
             (mgets or 0) / gets1, n_m))
    print("assumed: image %.0f GB unpacked (%.1f GB compressed); origin %.0f Gb/s; mirror %.0f "
          "Gb/s (fetch duplication %.1fx); shared fs %.0f GB/s read, %.1f GB/s one writer; a task "
          "reads %.0f%% of the image to start; node import rate as measured"
          % (a.image_gb, C / 1e9, a.origin_gbit, a.mirror_gbit, dup, a.fs_read_gbyte,
             a.fs_write_gbyte, W * 100))
    prep, _ = pick(rows, "squashfs-prep", "once", "first_s")
    if prep is not None:
        print("squashfs file: made once per image, off every job's path, in %.0f s here for the "
              "measured image; ~%.0f s for this one at the measured rate"
              % (prep, prep * U / measured_u))
    print("%-9s %6s %16s %18s" % ("mode", "nodes", "origin GB/start", "all running (s)"))
    for n in a.nodes:
        modes = {
            "pull": (n * C, max(n * C / origin_bw, U / node_rate) + (start_pull or 0)),
            "mirror": (C * dup, max(C * dup / origin_bw, n * C / mirror_bw, U / node_rate)
                       + (start_pull or 0)),
            "shared": (C, max(C / origin_bw, U / min(node_rate, fs_write)) + (start_shared or 0)
                       + n * W * U / fs_read),
            "squashfs": (0.0, (start_sq or 0) + n * W * C / fs_read),
        }
        best = min(modes, key=lambda m: modes[m][1])
        for m, (origin, t) in modes.items():
            print("%-9s %6d %16.1f %18.1f%s" % (m, n, origin / 1e9, t, "  <- best" if m == best else ""))


if __name__ == "__main__":
    main()
