#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# bench/squashfs: what a node pays to start from a squashfs image file (issue 15, item 1) when the
# file is mounted (squashfuse_ll in the job's user namespace) against unpacked (sqfs2tar and the
# layer unpack into the node cache, the fallback without FUSE), cold and warm. See README.md.
#
#   bench/squashfs/run.bash [--image OCI_LAYOUT] [--runs N]
#
# Run as root (it drops the page cache between cold runs and flips /dev/fuse's mode to force the
# unpack); every measured command runs as the job user slwuser. The node cache is on tmpfs.
set -euo pipefail
REPO_DIR=$(cd "$(dirname "$0")/../.." && pwd)
SLIPWAY=${SLIPWAY_BIN:-$REPO_DIR/build/launcher/slipway}
IMAGE=$(ls -d /var/cache/slipway-images/torch-[0-9a-f]* 2>/dev/null | head -n1 || true)
RUNS=3
while (($#)); do
    case $1 in
        --image) IMAGE=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        *) echo "usage: $0 [--image OCI_LAYOUT] [--runs N]" >&2; exit 2 ;;
    esac
done
[[ $EUID == 0 ]] || { echo "run as root" >&2; exit 1; }
[[ -d $IMAGE ]] || { echo "no image: build one with contrib/sandbox/slipway-sandbox images torch" >&2; exit 1; }
WORK=/dev/shm/slipway-bench-sqsh
rm -rf "$WORK" && mkdir -m 1777 "$WORK"
install -m 0755 "$SLIPWAY" "$WORK/slipway"
trap 'chmod 0666 /dev/fuse; rm -rf "$WORK"' EXIT
as_user() { setpriv --reuid=slwuser --regid=slwuser --init-groups env -i PATH=/usr/bin:/bin HOME=/tmp SLIPWAY_CACHE_DIR="$WORK/cache" "$@"; }
as_user "$WORK/slipway" import "$IMAGE" --squashfs "$WORK/image.sqsh" >/dev/null
SIZE=$(stat -c %s "$WORK/image.sqsh")

# seconds COMMAND...: wall time of one run.
seconds() { local t0; t0=$(date +%s.%N); "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; }
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
median() { tr ' ' '\n' | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

run_row() {   # run_row NAME PREPARE COMMAND...
    local name=$1 prep=$2 t all=""
    shift 2
    for ((i = 0; i < RUNS; i++)); do
        $prep
        t=$(seconds as_user "$WORK/slipway" run --container-image="$WORK/image.sqsh" -- "$@")
        all+="$t "
    done
    printf '%-44s %8s s   (runs: %s)\n' "$name" "$(median <<<"${all% }")" "${all% }"
}
fresh_cache() { rm -rf "$WORK/cache"; }
unpack_cold() { chmod 0600 /dev/fuse; fresh_cache; cold; }
unpack_warm() { chmod 0600 /dev/fuse; }
mount_cold() { chmod 0666 /dev/fuse; fresh_cache; cold; }
mount_warm() { chmod 0666 /dev/fuse; }

echo "image: $IMAGE as squashfs, $((SIZE / 1048576)) MiB; $(nproc) CPUs; runs: $RUNS; node cache on tmpfs"
for cmd in true "python3 -c 'import torch'"; do
    echo "-- command: $cmd"
    # shellcheck disable=SC2086
    if [[ $cmd == true ]]; then set -- true; else set -- python3 -c 'import torch'; fi
    run_row "unpacked, cold (empty cache, no page cache)" unpack_cold "$@"
    run_row "unpacked, warm (cached image)" unpack_warm "$@"
    run_row "mounted, cold (no page cache)" mount_cold "$@"
    run_row "mounted, warm" mount_warm "$@"
done
