# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Stand-in device nodes and sysfs entries on the sandbox's nodes, for hardware the sandbox lacks
# (RDMA HCAs here; any /dev and /sys/class entries). Each node's slurmd runs in a mount namespace
# of its own (contrib/sandbox/slipway-sandbox, node_init); there, as root, /dev becomes a tmpfs copy
# of the node's /dev plus the stand-in nodes (character devices with /dev/null's numbers: opening
# one works and reading it gives EOF) and /sys/class a tmpfs copy of its links plus the stand-in
# files. Nothing changes on the host or in other sandboxes, and steps started after it see it
# exactly as a node with the hardware shows it. A Slurm restart (`slipway-sandbox up` with other
# plugstack keys) makes new namespaces: call standin_up again. standin_down undoes it.
#
#   standin_up DEVICES SYSFILES   DEVICES: "MODE PATH" lines; SYSFILES: "PATH=CONTENT" lines

# Runs bash SCRIPT (stdin) with ARGS as root in the mount namespace of every node's slurmd.
_standin_in_nodes() {
    local pidfile pid
    for pidfile in "$SANDBOX_DIR"/run/slurmd-node*.pid; do
        pid=$(cat "$pidfile")
        [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */slurmd* ]] || fail "no slurmd for $pidfile"
        nsenter -t "$pid" -m -- bash -s -- "$@" <<<"$_STANDIN_SCRIPT" ||
            fail "stand-ins on the node of $pidfile failed"
    done
}

_STANDIN_SCRIPT='
set -euo pipefail
mode=$1 devices=${2:-} sysfiles=${3:-}
# A tmpfs named NAME over DIR holding what DIR held (device nodes and links copied, directories
# bound with their mounts), unless one is there already.
cover() {
    local dir=$1 name=$2 keep e n
    [[ $(findmnt -n -o SOURCE --mountpoint "$dir" | tail -n 1) == "$name" ]] && return 0
    keep=/tmp/.standin-keep-$name
    mkdir -p "$keep"
    mount --rbind "$dir" "$keep"
    mount -t tmpfs -o mode=0755,nosuid "$name" "$dir"
    for e in "$keep"/* "$keep"/.[!.]*; do
        [[ -e $e || -L $e ]] || continue
        n=${e##*/}
        if [[ -L $e ]]; then cp -P "$e" "$dir/$n"
        elif [[ -d $e && $name == *dev ]]; then mkdir "$dir/$n" && mount --rbind "$e" "$dir/$n"
        elif [[ -d $e ]]; then mkdir "$dir/$n" && for l in "$e"/*; do [[ -L $l ]] && cp -P "$l" "$dir/$n/"; done; true
        elif [[ -c $e || -b $e ]]; then cp -a "$e" "$dir/$n"
        fi
    done
    umount -l "$keep" && rmdir "$keep"
}
if [[ $mode == down ]]; then
    for d in /sys/class /dev; do
        while [[ $(findmnt -n -o SOURCE --mountpoint "$d" | tail -n 1) == slw-standin-* ]]; do umount -l "$d"; done
    done
    exit 0
fi
cover /dev slw-standin-dev
cover /sys/class slw-standin-sys
while read -r m path; do
    [[ -n $path ]] || continue
    mkdir -p "${path%/*}"; rm -f "$path"; mknod -m "$m" "$path" c 1 3
done <<<"$devices"
while IFS== read -r path content; do
    [[ -n $path ]] || continue
    mkdir -p "${path%/*}"; printf "%s\n" "$content" >"$path"
done <<<"$sysfiles"
'

standin_up() { _standin_in_nodes up "$1" "${2:-}"; }
standin_down() { _standin_in_nodes down; }
