#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Per-task start cost of a container with a cached image, Slipway against its peers and the floor,
# and what --container-image adds to an 8-task srun on 4 nodes (docs/performance.md).
#
#   bench_launch.sh [--runs N] [--rounds R] [--image NAME] [--out DIR]   (as root; measures as the job user)
#
# Needs a sandbox up (contrib/sandbox/slipway-sandbox up; SLIPWAY_SANDBOX_INSTANCE picks which),
# the image pushed (slipway-sandbox images NAME), hyperfine, and the slipway binary
# ($SLIPWAY_BIN, default <repo>/build/launcher/slipway). Every command runs as the unprivileged job
# user (slwuser), as a real job would, on the same rootfs: the image as `slipway import` unpacked it.
# Prints one table (median ms, ratio to the floor) and the targets; hyperfine's JSON stays in --out.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SANDBOX=$REPO/contrib/sandbox/slipway-sandbox
INSTANCE=${SLIPWAY_SANDBOX_INSTANCE:-0}
if ((INSTANCE == 0)); then SANDBOX_DIR=/var/lib/slipway-sandbox; else SANDBOX_DIR=/var/lib/slipway-sandbox-$INSTANCE; fi
SLIPWAY_BIN=${SLIPWAY_BIN:-$REPO/build/launcher/slipway}
JOB_USER=slwuser
RUNS=200 ROUNDS=10 IMAGE=busybox OUT=/tmp/bench-launch-$(date +%Y%m%d-%H%M%S)

die() { echo "bench_launch: $*" >&2; exit 1; }

while (($#)); do
    case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --image) IMAGE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        *) sed -n '4,13s/^# \{0,1\}//p' "$0"; exit 2 ;;
    esac
done
[[ $EUID -eq 0 ]] || die "run as root: it measures as $JOB_USER through setpriv"
command -v hyperfine >/dev/null || die "hyperfine missing (apt-get install -y hyperfine)"
[[ -x $SLIPWAY_BIN ]] || die "$SLIPWAY_BIN not built (make slipway) or set SLIPWAY_BIN"
SLIPWAY_BIN=$(realpath "$SLIPWAY_BIN")   # the commands run from $OUT
REGISTRY=10.77.$INSTANCE.1:5000
REF=$REGISTRY/slipway/$IMAGE:latest
UID_=$(id -u $JOB_USER)
CACHE=/var/tmp/slipway-bench-$UID_
HOME_=/var/tmp/slipway-bench-home-$UID_        # podman's storage; not the shared home
mkdir -p "$OUT" "$HOME_" "/tmp/slipway-bench-xdg-$UID_"
chown $JOB_USER: "$OUT" "$HOME_" "/tmp/slipway-bench-xdg-$UID_"
chmod 700 "/tmp/slipway-bench-xdg-$UID_"

# as_user CMD...: CMD as the job user with a small, fixed environment.
as_user() {
    (cd "$OUT" && setpriv --reuid=$JOB_USER --regid=$JOB_USER --init-groups -- env -i \
        HOME="$HOME_" USER=$JOB_USER LOGNAME=$JOB_USER PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        XDG_RUNTIME_DIR="/tmp/slipway-bench-xdg-$UID_" SLURM_CONF="$SANDBOX_DIR/etc/slurm.conf" \
        SLIPWAY_CACHE_DIR="$CACHE" SLIPWAY_INSECURE_REGISTRIES="$REGISTRY" "$@")
}

read -r DIGEST ROOTFS < <(as_user "$SLIPWAY_BIN" import "$REF") || die "slipway import $REF failed"
[[ -x $ROOTFS/bin/true ]] || die "$ROOTFS/bin/true missing"
echo "image $REF = $DIGEST" >&2
echo "rootfs $ROOTFS" >&2

# The per-task rows run in ROUNDS rounds, each row a hyperfine batch of RUNS/ROUNDS in turn (host,
# floor, slipway, ch-run, ...), so a change in the machine's load while the rows run hits all of
# them alike; a row's figures are over all its rounds. hyperfine runs without a shell (-N).
declare -A CMD RUNS_OF
row() { CMD[$1]=$3; RUNS_OF[$1]=$2; ROWS+=("$1"); }
ROWS=()
row host "$RUNS" "$ROOTFS/bin/true"
row floor "$RUNS" "unshare -U -r -m /usr/sbin/chroot $ROOTFS /bin/true"
row slipway_tag "$RUNS" "$SLIPWAY_BIN run --container-image=$REF -- /bin/true"
row slipway_digest "$RUNS" "$SLIPWAY_BIN run --container-image=${REF%:latest}@$DIGEST -- /bin/true"
row ch_run "$RUNS" "ch-run $ROOTFS -- /bin/true"
row bwrap "$RUNS" "bwrap --unshare-user --ro-bind $ROOTFS / --dev /dev --proc /proc /bin/true"
row podman $((RUNS / 10 > ROUNDS ? RUNS / 10 : ROUNDS)) "podman run --rm --network=host --rootfs $ROOTFS /bin/true"
for ((r = 0; r < ROUNDS; r++)); do
    for name in "${ROWS[@]}"; do
        n=$(( (RUNS_OF[$name] + ROUNDS - 1) / ROUNDS ))
        as_user hyperfine -N --style none --warmup 3 --runs "$n" --export-json "$OUT/$name.$r.json" \
            "${CMD[$name]}" >/dev/null || echo "bench_launch: '${CMD[$name]}' failed (round $r)" >&2
    done
done
# One JSON per row, hyperfine's shape, over every round's times.
python3 - "$OUT" "$ROUNDS" "${ROWS[@]}" <<'PY'
import json, os, statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for name in names:
    times, command = [], None
    for r in range(rounds):
        p = os.path.join(out, "%s.%d.json" % (name, r))
        if os.path.exists(p):
            res = json.load(open(p))["results"][0]
            times += res["times"]
            command = res["command"]
            os.remove(p)
    if len(times) >= 2:
        json.dump({"results": [{"command": command, "median": statistics.median(times),
                                "mean": statistics.mean(times), "stddev": statistics.stdev(times),
                                "times": times}]}, open(os.path.join(out, name + ".json"), "w"))
PY

if [[ $("$SANDBOX" status 2>/dev/null || true) =~ slurmctld\ +running ]]; then
    SRUN_RUNS=$((RUNS / 10 > 10 ? RUNS / 10 : 10))
    # Interleaved (plain, container, plain, ...): an srun takes ~0.3 s, long enough for the load of
    # a shared machine to drift between two back-to-back hyperfine batches.
    as_user python3 - "$OUT" "$SRUN_RUNS" "$REF" <<'PY' || echo "bench_launch: the srun rows failed" >&2
import json, os, statistics, subprocess, sys, time
out, runs, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cmds = {"srun_plain": ["srun", "-N4", "-n8", "-K", "/bin/true"],
        "srun_container": ["srun", "-N4", "-n8", "-K", "--container-image=" + ref, "/bin/true"]}
times = {k: [] for k in cmds}
for i in range(runs + 2):
    for k, c in cmds.items():
        t = time.monotonic()
        subprocess.run(c, check=True, stdout=subprocess.DEVNULL, cwd="/")  # a directory every node has
        if i >= 2:  # two warm-up rounds
            times[k].append(time.monotonic() - t)
for k, t in times.items():
    r = {"command": " ".join(cmds[k]), "median": statistics.median(t), "mean": statistics.mean(t),
         "stddev": statistics.stdev(t), "times": t}
    json.dump({"results": [r]}, open(os.path.join(out, k + ".json"), "w"))
PY
else
    echo "bench_launch: sandbox $INSTANCE is not up; no srun figures" >&2
fi

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def stats(name):
    p = os.path.join(out, name + ".json")
    if not os.path.exists(p):
        return None
    r = json.load(open(p))["results"][0]
    return r["median"] * 1e3, r["mean"] * 1e3, r["stddev"] * 1e3, len(r["times"])
rows = [("host", "host exec of /bin/true"), ("floor", "floor: unshare -U -r -m + chroot"),
        ("slipway_tag", "slipway run IMG:tag"), ("slipway_digest", "slipway run IMG@digest"),
        ("ch_run", "ch-run"), ("bwrap", "bwrap"), ("podman", "podman run --rootfs (rootless)")]
floor = stats("floor")
print("%-36s %10s %10s %8s %6s %10s" % ("per task (/bin/true)", "median ms", "mean ms", "sd", "runs", "x floor"))
for key, label in rows:
    s = stats(key)
    if s:
        print("%-36s %10.2f %10.2f %8.2f %6d %10.2f" % (label, s[0], s[1], s[2], s[3], s[0] / floor[0] if floor else float("nan")))
    else:
        print("%-36s %10s" % (label, "failed"))
plain, cont = stats("srun_plain"), stats("srun_container")
if plain and cont:
    print()
    print("%-36s %10s %10s %8s %6s" % ("srun -N4 -n8", "median ms", "mean ms", "sd", "runs"))
    print("%-36s %10.2f %10.2f %8.2f %6d" % ("without --container-image", *plain))
    print("%-36s %10.2f %10.2f %8.2f %6d" % ("with --container-image (cached)", *cont))
    print("%-36s %10.2f" % ("added by the container", cont[0] - plain[0]))
print()
best = min((stats(k)[0], k) for k in ("slipway_tag", "slipway_digest") if stats(k)) if stats("slipway_tag") or stats("slipway_digest") else None
if floor and best:
    peers = [stats(k)[0] for k in ("ch_run", "bwrap", "podman") if stats(k)]
    print("target: slipway run within 1.5x the floor: %s (%.2fx, %s)" % ("PASS" if best[0] <= 1.5 * floor[0] else "FAIL", best[0] / floor[0], best[1]))
    print("target: faster than every peer: %s" % ("PASS" if all(best[0] < p for p in peers) else "FAIL"))
    tag = stats("slipway_tag")
    if tag:
        slower = [k for k in ("ch_run", "bwrap", "podman") if stats(k) and stats(k)[0] > tag[0]]
        print("        (by tag, with one registry request per run: %.2fx the floor; faster than %s)"
              % (tag[0] / floor[0], ", ".join(slower) or "no peer"))
if plain and cont:
    print("target: at most 50 ms added to srun -N4 -n8: %s (%.1f ms)" % ("PASS" if cont[0] - plain[0] <= 50 else "FAIL", cont[0] - plain[0]))
PY
echo "hyperfine JSON: $OUT" >&2
