#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Import benchmark (not a test): cold pull + unpack of a test image (default debian-python) from a
# TLS docker-registry on 127.0.0.1 with a self-signed CA, into a fresh tmpfs each run, by
#   slipway import             (this tree's build)
#   ch-image pull              (Debian charliecloud; it speaks only HTTPS, hence the TLS registry)
#   skopeo copy + umoci unpack --rootless
# interleaved run by run, then the re-import of the cached image by slipway. Prints every time,
# the medians and the ratios. Needs root (tmpfs mounts, the registry); see README.md.
#
#   bench/import/run.bash [--runs N] [--image NAME] [--slipway PATH] [--keep]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RUNS=5 IMAGE=debian-python SLIPWAY=$REPO/build/launcher/slipway KEEP=0 REIMPORTS=15
while (($#)); do
    case $1 in
        --runs) RUNS=$2; shift 2 ;;
        --image) IMAGE=$2; shift 2 ;;
        --slipway) SLIPWAY=$(readlink -f "$2"); shift 2 ;;
        --keep) KEEP=1; shift ;;
        *) sed -n '4,12s/^# \{0,1\}//p' "$0"; exit 2 ;;
    esac
done
[[ $EUID -eq 0 ]] || { echo "run.bash: run as root (tmpfs mounts, registry)" >&2; exit 1; }
[[ -x $SLIPWAY ]] || { echo "run.bash: $SLIPWAY not built (make slipway, or --slipway PATH)" >&2; exit 1; }
# Debian's python (ch-image needs python3-lark), whatever python3 comes first in PATH.
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH USER=${USER:-$(id -un)}

WORK=$(mktemp -d /var/tmp/slipway-bench-import.XXXXXX)
REGISTRY_PID=
cleanup() {
    [[ -z $REGISTRY_PID ]] || kill "$REGISTRY_PID" 2>/dev/null || true
    mountpoint -q "$WORK/fs" && umount "$WORK/fs"
    ((KEEP)) || rm -rf "$WORK"
}
trap cleanup EXIT

say() { echo "# $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
seconds_since() { python3 -c "import time,sys; print(f'{time.time()-float(sys.argv[1]):.3f}')" "$1"; }
median() { python3 -c 'import statistics,sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.3f}")' "$@"; }

# ------------------------------------------------------------ registry --
make_tls() {
    mkdir -p "$WORK/certs"
    printf 'subjectAltName=IP:127.0.0.1\n' >"$WORK/ext.cnf"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/ca.key" -out "$WORK/ca.pem" -days 2 \
        -subj /CN=slipway-bench-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout "$WORK/srv.key" -out "$WORK/srv.csr" \
        -subj /CN=127.0.0.1 2>/dev/null
    openssl x509 -req -in "$WORK/srv.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
        -out "$WORK/srv.pem" -days 2 -extfile "$WORK/ext.cnf" 2>/dev/null
    cp "$WORK/ca.pem" "$WORK/certs/ca.crt"   # skopeo's --*-cert-dir takes CAs as *.crt
}

start_registry() {
    PORT=$(free_port)
    cat >"$WORK/registry.yml" <<EOC
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $WORK/registry}}
http:
  addr: 127.0.0.1:$PORT
  tls: {certificate: $WORK/srv.pem, key: $WORK/srv.key}
EOC
    setsid docker-registry serve "$WORK/registry.yml" </dev/null >"$WORK/registry.log" 2>&1 &
    REGISTRY_PID=$!
    for _ in $(seq 100); do
        curl -fsS --cacert "$WORK/ca.pem" "https://127.0.0.1:$PORT/v2/" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "run.bash: registry did not start: $(cat "$WORK/registry.log")" >&2
    exit 1
}

# ---------------------------------------------------------------- tools --
# Each runs in $FS (a fresh tmpfs) and must leave an unpacked rootfs there.
run_slipway() {
    SLIPWAY_CACHE_DIR=$FS/cache SLIPWAY_CA_FILE=$WORK/ca.pem "$SLIPWAY" import "$REF" >/dev/null
    ROOTFS=$(echo "$FS"/cache/images/*/rootfs)
}
run_chimage() {
    REQUESTS_CA_BUNDLE=$WORK/ca.pem ch-image -s "$FS/ch" pull "$REF" bench >"$WORK/ch-image.log" 2>&1
    ROOTFS=$FS/ch/img/bench
}
run_skopeo_umoci() {
    skopeo copy -q --src-cert-dir "$WORK/certs" "docker://$REF" "oci:$FS/oci:latest" &&
        umoci unpack --rootless --image "$FS/oci:latest" "$FS/bundle" >/dev/null 2>&1
    ROOTFS=$FS/bundle/rootfs
}

declare -A TIMES CPU
# User + system seconds of the children, from the second line of bash's `times`: "0m1.5s 0m0.3s".
cpu_seconds() {
    sed -n 2p "$1" | python3 -c 'import re,sys; t = sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", sys.stdin.read())); print("%.2f" % t)'
}
TOOLS=(slipway chimage skopeo_umoci)
declare -A LABEL=([slipway]="slipway import" [chimage]="ch-image pull"
                  [skopeo_umoci]="skopeo copy + umoci unpack --rootless")

# One timed cold import by TOOL into a fresh tmpfs.
time_one() {
    local tool=$1 t0
    mkdir -p "$WORK/fs" && mount -t tmpfs -o size=8g,mode=0755 bench "$WORK/fs"
    FS=$WORK/fs/$tool && mkdir -p "$FS"
    sync
    t0=$(date +%s.%N)
    # In a subshell, so that `times` reports the CPU time of this tool's processes alone.
    ( "run_$tool" && echo "ROOTFS=$ROOTFS" >"$WORK/rootfs" && times >"$WORK/times" ) \
        || { echo "run.bash: $tool failed; see $WORK (--keep)" >&2; umount "$WORK/fs"; exit 1; }
    TIMES[$tool]+="$(seconds_since "$t0") "
    CPU[$tool]+="$(cpu_seconds "$WORK/times") "
    source "$WORK/rootfs"
    [[ -x $ROOTFS/usr/bin/python3 || -e $ROOTFS/bin/sh ]] || { echo "run.bash: $tool left no rootfs" >&2; exit 1; }
    umount "$WORK/fs"
}

# ----------------------------------------------------------------- main --
LAYOUT=$("$REPO/contrib/images/build-image" "$IMAGE" | cut -d' ' -f2)
make_tls
start_registry
REF=127.0.0.1:$PORT/bench/$IMAGE:latest
skopeo copy -q --dest-cert-dir "$WORK/certs" "oci:$LAYOUT:latest" "docker://$REF"
DIGEST=$(skopeo inspect --cert-dir "$WORK/certs" --raw "docker://$REF" | sha256sum | cut -d' ' -f1)
say "image $IMAGE: $(du -sh "$WORK/registry" | cut -f1) in the registry, digest sha256:$DIGEST"
say "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for tool in "${TOOLS[@]}"; do time_one "$tool"; TIMES[$tool]= CPU[$tool]=; done   # warm-up (page cache)
for ((run = 1; run <= RUNS; run++)); do
    for tool in "${TOOLS[@]}"; do time_one "$tool"; done
    say "run $run/$RUNS: $(for t in "${TOOLS[@]}"; do x=${TIMES[$t]% }; printf '%s %ss  ' "$t" "${x##* }"; done)"
done

# Re-import of the cached image: by tag (one manifest request) and pinned by digest (none).
mkdir -p "$WORK/fs" && mount -t tmpfs -o size=8g,mode=0755 bench "$WORK/fs"
FS=$WORK/fs/slipway && mkdir -p "$FS" && run_slipway
declare -A REIMPORT
for ((i = 0; i < REIMPORTS; i++)); do
    for how in tag digest; do
        ref=$REF
        [[ $how == tag ]] || ref=$REF@sha256:$DIGEST
        t0=$(date +%s.%N)
        SLIPWAY_CACHE_DIR=$FS/cache SLIPWAY_CA_FILE=$WORK/ca.pem "$SLIPWAY" import "$ref" >/dev/null
        REIMPORT[$how]+="$(seconds_since "$t0") "
    done
done
umount "$WORK/fs"

echo
printf '%-40s %9s %9s   %s\n' "cold pull + unpack of $IMAGE" "wall" "CPU" "runs: wall (s)"
for tool in "${TOOLS[@]}"; do
    # shellcheck disable=SC2086
    printf '%-40s %8ss %8ss   %s\n' "${LABEL[$tool]}" "$(median ${TIMES[$tool]})" \
        "$(median ${CPU[$tool]})" "${TIMES[$tool]}"
done
# shellcheck disable=SC2086
python3 - "$(median ${TIMES[slipway]})" "$(median ${TIMES[chimage]})" "$(median ${TIMES[skopeo_umoci]})" \
    "$(median ${CPU[slipway]})" "$(median ${CPU[chimage]})" "$(median ${CPU[skopeo_umoci]})" <<'EOP'
import sys
s, c, u, cs, cc, cu = map(float, sys.argv[1:])
print(f"speed-up (wall medians): {c / s:.2f}x vs ch-image, {u / s:.2f}x vs skopeo+umoci; "
      f"{min(c, u) / s:.2f}x vs the faster peer (target >= 2.5x)")
print(f"CPU time (medians): {cc / cs:.2f}x less than ch-image, {cu / cs:.2f}x less than skopeo+umoci")
EOP
for how in tag digest; do
    # shellcheck disable=SC2086
    printf 're-import of the cached image (%s): median %.1f ms (target < 50 ms)\n' "$how" \
        "$(python3 -c 'import sys; print(float(sys.argv[1]) * 1000)' "$(median ${REIMPORT[$how]})")"
done
