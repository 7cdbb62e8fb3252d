#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# bench/scale: time to the first and the last task of `srun -N N` in a ≥ 1 GB image, and what the
# origin registry serves, for each way a cluster can get the image to its nodes (issue 15, item
# 5): per-node pull, a pull-through mirror, a cache shared by the nodes, a prepared squashfs file on
# a shared directory; cold and warm; on 1..16 sandbox nodes. See README.md; model.py takes the
# per-node costs measured here to 100 and 1,000 nodes.
#
#   bench/scale/run.bash [--nodes "1 2 4 8 16"] [--modes "pull mirror shared squashfs"] [--image torch]
#                        [--out FILE.tsv]
#
# Run as root with the plugin built (SLIPWAY_PLUGIN, SLIPWAY_BIN). It uses sandbox instance 0 and
# leaves it down. Node caches are on tmpfs (the root disk here creates files ~6x slower than real
# nodes'); the "shared" directory is a tmpfs every node sees (/dev/shm), standing for NFS/Lustre.
# Per-node modes keep a copy of the image per node in memory: they stop at 8 nodes unless
# --max-copies says otherwise.
set -euo pipefail
REPO_DIR=$(cd "$(dirname "$0")/../.." && pwd)
SANDBOX=$REPO_DIR/contrib/sandbox/slipway-sandbox
SLIPWAY=${SLIPWAY_BIN:-$REPO_DIR/build/launcher/slipway}
NODES="1 2 4 8 16" MODES="pull mirror shared squashfs" IMAGE=torch OUT=/dev/stdout MAX_COPIES=8
while (($#)); do
    case $1 in
        --nodes) NODES=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --image) IMAGE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --max-copies) MAX_COPIES=$2; shift 2 ;;
        *) sed -n '4,11p' "$0" >&2; exit 2 ;;
    esac
done
[[ $EUID == 0 ]] || { echo "run as root" >&2; exit 1; }
export SLIPWAY_SANDBOX_INSTANCE=0
STATE=/var/lib/slipway-sandbox
ORIGIN=10.77.0.1:5000 MIRROR=10.77.0.1:5003
ACCESS=$STATE/log/registry-access.log
UID_=$(id -u slwuser)
SHARED=/dev/shm/slipway-bench-scale
say() { echo "bench/scale: $*" >&2; }

"$SANDBOX" up >/dev/null
"$SANDBOX" images "$IMAGE" >/dev/null
REF=$("$SANDBOX" image "$IMAGE")
REPO_PATH=${REF#*/}; REPO_PATH=${REPO_PATH%%[:@]*}   # slipway/torch

cleanup() {
    [[ -e $SHARED/mirror.pid ]] && kill "$(cat "$SHARED/mirror.pid")" 2>/dev/null || true
    "$SANDBOX" down >/dev/null 2>&1 || true
    local d
    for d in "$STATE"/nodes/node*/var-tmp; do umount "$d" 2>/dev/null || true; done
    rm -rf "$SHARED"
}
trap cleanup EXIT
rm -rf "$SHARED" && mkdir -m 1777 -p "$SHARED" "$SHARED/cache"

# The squashfs file every squashfs run starts from, made once (its making is reported).
t0=$(date +%s.%N)
setpriv --reuid=slwuser --regid=slwuser --init-groups env -i PATH=/usr/bin:/bin HOME=/tmp \
    SLIPWAY_CACHE_DIR="$SHARED/prep" SLIPWAY_INSECURE_REGISTRIES=$ORIGIN \
    "$SLIPWAY" import "$REF" --squashfs "$SHARED/image.sqsh" >/dev/null
PREP=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
rm -rf "$SHARED/prep"
SQSH_BYTES=$(stat -c %s "$SHARED/image.sqsh")
say "squashfs file: $((SQSH_BYTES >> 20)) MiB, made in $PREP s (pull, unpack, mksquashfs)"

# up N ARGS: the sandbox with N nodes, node caches on fresh tmpfs, plugin ARGS.
up() {
    "$SANDBOX" down >/dev/null 2>&1 || true
    local d
    for d in "$STATE"/nodes/node*/var-tmp; do umount "$d" 2>/dev/null || true; done
    rm -rf "$STATE"/nodes
    local i
    for ((i = 1; i <= $1; i++)); do
        mkdir -p "$STATE/nodes/node$i/var-tmp"
        mount -t tmpfs -o mode=1777 slipway-bench "$STATE/nodes/node$i/var-tmp"
    done
    SLIPWAY_PLUGIN_ARGS=$2 "$SANDBOX" up --nodes "$1" >/dev/null
}

start_mirror() {
    [[ -e $SHARED/mirror.pid ]] && kill "$(cat "$SHARED/mirror.pid")" 2>/dev/null || true
    rm -rf "$SHARED/mirror" && mkdir -p "$SHARED/mirror/storage"
    cat >"$SHARED/mirror/config.yml" <<EOF
version: 0.1
log: {level: error, accesslog: {disabled: false}}
storage: {filesystem: {rootdirectory: $SHARED/mirror/storage}, delete: {enabled: true}}
http: {addr: $MIRROR}
proxy: {remoteurl: http://$ORIGIN}
EOF
    setsid /usr/bin/docker-registry serve "$SHARED/mirror/config.yml" </dev/null >"$SHARED/mirror/log" 2>&1 &
    echo $! >"$SHARED/mirror.pid"
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -n $(ss -Hltn "src 10.77.0.1 and sport = :5003") ]] && return 0
        sleep 0.05
    done
    say "the mirror did not start"; exit 1
}

cold_nodes() { rm -rf "$STATE"/nodes/node*/var-tmp/slipway-"$UID_"; }
drop_page_cache() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# measure MODE N STATE IMAGE: one srun -N N, one task per node; prints a TSV row.
measure() {
    local mode=$1 n=$2 state=$3 image=$4 mark t0 out first last gets bytes
    mark=$(wc -l <"$ACCESS")
    t0=$(date +%s.%N)
    out=$("$SANDBOX" exec -- timeout 600 srun -N "$n" --ntasks-per-node=1 -K --container-image="$image" \
        date +%s.%N 2>&1) || { say "$mode N=$n $state failed: $out"; return 0; }
    first=$(grep -E '^[0-9]+\.[0-9]+$' <<<"$out" | sort -n | head -n1)
    last=$(grep -E '^[0-9]+\.[0-9]+$' <<<"$out" | sort -n | tail -n1)
    gets=$(tail -n +"$((mark + 1))" "$ACCESS" | grep -c "\"GET /v2/$REPO_PATH/blobs/" || true)
    bytes=$(tail -n +"$((mark + 1))" "$ACCESS" | { grep "\"GET /v2/$REPO_PATH/blobs/" || true; } |
        awk '{ s += $10 } END { printf "%.0f", s }')
    printf '%s\t%d\t%s\t%.2f\t%.2f\t%d\t%s\n' "$mode" "$n" "$state" \
        "$(awk -v a="$t0" -v b="$first" 'BEGIN { print b - a }')" \
        "$(awk -v a="$t0" -v b="$last" 'BEGIN { print b - a }')" "$gets" "$bytes" | tee -a "$OUT" >&2
}

printf 'mode\tnodes\tstate\tfirst_s\tlast_s\torigin_blob_gets\torigin_blob_bytes\n' >>"$OUT"
printf 'squashfs-prep\t1\tonce\t%s\t%s\t0\t%d\n' "$PREP" "$PREP" "$SQSH_BYTES" >>"$OUT"
for n in $NODES; do
    for mode in $MODES; do
        case $mode in
            pull)
                ((n <= MAX_COPIES)) || continue
                up "$n" ""
                cold_nodes; drop_page_cache; measure pull "$n" cold "$REF"
                measure pull "$n" warm "$REF" ;;
            mirror)
                ((n <= MAX_COPIES)) || continue
                start_mirror
                up "$n" "insecure_registries=$ORIGIN,$MIRROR registry_mirrors=$ORIGIN=$MIRROR"
                cold_nodes; drop_page_cache; measure mirror "$n" cold "$REF"
                cold_nodes; measure mirror "$n" mirror-warm "$REF"
                measure mirror "$n" warm "$REF" ;;
            shared)
                up "$n" "cache_dir=$SHARED/cache"
                rm -rf "$SHARED/cache/$UID_"; drop_page_cache; measure shared "$n" cold "$REF"
                measure shared "$n" warm "$REF" ;;
            squashfs)
                up "$n" ""
                drop_page_cache; measure squashfs "$n" cold "$SHARED/image.sqsh"
                measure squashfs "$n" warm "$SHARED/image.sqsh" ;;
        esac
    done
done
