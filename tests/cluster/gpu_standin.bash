# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Stand-in GPUs for the sandbox's nodes (test_dl_gpus.bash): what an NVIDIA node shows Slipway,
# made without a GPU, inside one node's mount namespace only (the host and the other nodes, and
# other sandboxes, see nothing of it):
#   /dev            a tmpfs copy of the node's /dev plus nvidia0..N-1, nvidiactl, nvidia-uvm,
#                   nvidia-uvm-tools and nvidia-caps/nvidia-cap1, char devices with /dev/null's
#                   major:minor (1:3), so opening one works as on a GPU node
#   /proc/driver    nvidia/version (driver 535.104.05) and nvidia/gpus/BUS/information per GPU
#   /etc/ld.so.cache  the node's cache plus the stand-in driver: libcuda.so.1 and libnvidia-ml.so.1,
#                   tiny libraries with the real sonames (programs/gpu/standin_*.c)
#   /usr/local/bin  plus a stand-in nvidia-smi that lists the GPUs through the stand-in NVML
# gpu_standin_build builds the pieces and the test images once; gpu_standin_install / _remove
# put them on a node and take them off again (teardown), so the other tests see a CPU node.

readonly GPU_DRIVER=535.104.05      # CUDA 12.2 (cuDriverGetVersion 12020)
readonly GPU_COMPAT_DRIVER=550.54.15  # an image's forward-compatibility libcuda: CUDA 12.4
GPU_DIR=/srv/slipway-gpu-test-${SLIPWAY_SANDBOX_INSTANCE:-0}  # the nodes see /srv, not /tmp

# The stand-in driver, nvidia-smi, the probe, and four OCI layouts of a tiny image running the probe
# (busybox and the host's C runtime, as contrib/images/nccl-app): cuda (the NVIDIA_* Env of an NGC
# image), plain (none), newer (needs CUDA 12.4, no compat libraries), stub (its ld.so cache names
# a stub libcuda.so.1), compat (needs 12.4 and carries /usr/local/cuda/compat with a newer libcuda).
gpu_standin_build() {
    local src=$REPO_DIR/tests/cluster/programs/gpu d=$GPU_DIR lib
    rm -rf "$d" && mkdir -p "$d"/{driver/lib,bin}
    lib=$d/driver/lib
    gcc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$lib/libcuda.so.$GPU_DRIVER" "$src/standin_cuda.c"
    gcc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 -DSTANDIN_DRIVER="\"$GPU_DRIVER\"" \
        -o "$lib/libnvidia-ml.so.$GPU_DRIVER" "$src/standin_nvml.c"
    ln -s "libcuda.so.$GPU_DRIVER" "$lib/libcuda.so.1"
    ln -s "libnvidia-ml.so.$GPU_DRIVER" "$lib/libnvidia-ml.so.1"
    gcc -O2 -o "$d/bin/nvidia-smi" "$src/standin_nvidia_smi.c" -ldl
    # The node's ld.so cache plus the stand-in driver (-X: leave every directory's links alone).
    printf 'include /etc/ld.so.conf.d/*.conf\n%s\n' "$lib" >"$d/ld.so.conf"
    ldconfig -X -C "$d/ld.so.cache" -f "$d/ld.so.conf"
    local rootfs=$d/rootfs
    mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,dev,proc,sys,run,root,home,lib64,usr/lib/x86_64-linux-gnu}
    install -d -m 1777 "$rootfs/tmp"
    install -m 0755 /bin/busybox "$rootfs/bin/busybox"
    local applet l
    for applet in $(/bin/busybox --list-full); do
        [[ $applet == bin/busybox ]] || ln -sf /bin/busybox "$rootfs/$applet"
    done
    cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/lib64/"
    for l in libc.so.6 libdl.so.2; do cp -L "/lib/x86_64-linux-gnu/$l" "$rootfs/usr/lib/x86_64-linux-gnu/"; done
    gcc -O2 -o "$rootfs/usr/bin/gpu-probe" "$src/gpu_probe.c" -ldl
    echo /usr/lib/x86_64-linux-gnu >"$rootfs/etc/ld.so.conf"
    ldconfig -r "$rootfs"
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$rootfs/etc/passwd"
    printf 'root:x:0:\n' >"$rootfs/etc/group"
    local pack=$REPO_DIR/contrib/images/oci_pack.py path=PATH=/usr/local/nvidia/bin:/usr/sbin:/usr/bin:/sbin:/bin
    local ngc=(--env NVIDIA_VISIBLE_DEVICES=all --env NVIDIA_DRIVER_CAPABILITIES=compute,utility
               --env LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64)
    "$pack" "$d/img-plain" latest --layer "$rootfs" --root-owned --mtime 0 --env "$path" >/dev/null
    "$pack" "$d/img-cuda" latest --layer "$rootfs" --root-owned --mtime 0 --env "$path" "${ngc[@]}" \
        --env 'NVIDIA_REQUIRE_CUDA=cuda>=12.2 brand=tesla,driver>=470,driver<471' >/dev/null
    "$pack" "$d/img-newer" latest --layer "$rootfs" --root-owned --mtime 0 --env "$path" "${ngc[@]}" \
        --env 'NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471' >/dev/null
    # A stub libcuda.so.1 the image's own ld.so cache names (a registered stubs directory).
    local stubs=$rootfs/usr/local/cuda/lib64/stubs
    mkdir -p "$stubs"
    gcc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -DSTANDIN_TAG='"stub"' -o "$stubs/libcuda.so.1" \
        "$src/standin_cuda.c"
    echo /usr/local/cuda/lib64/stubs >>"$rootfs/etc/ld.so.conf"
    ldconfig -r "$rootfs"
    "$pack" "$d/img-stub" latest --layer "$rootfs" --root-owned --mtime 0 --env "$path" "${ngc[@]}" >/dev/null
    rm -rf "$rootfs/usr/local/cuda"
    echo /usr/lib/x86_64-linux-gnu >"$rootfs/etc/ld.so.conf"
    ldconfig -r "$rootfs"
    local compat=$rootfs/usr/local/cuda-12.4/compat
    mkdir -p "$compat"
    gcc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -DSTANDIN_CUDA_VERSION=12040 -DSTANDIN_TAG='"compat"' \
        -o "$compat/libcuda.so.$GPU_COMPAT_DRIVER" "$src/standin_cuda.c"
    ln -s "libcuda.so.$GPU_COMPAT_DRIVER" "$compat/libcuda.so.1"
    ln -s cuda-12.4 "$rootfs/usr/local/cuda"
    "$pack" "$d/img-compat" latest --layer "$rootfs" --root-owned --mtime 0 --env "$path" "${ngc[@]}" \
        --env 'NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=535,driver<536' >/dev/null
    rm -rf "$rootfs"
    chmod -R a+rX "$d"
}

# The pid of node I's slurmd: its mount namespace is the node's.
gpu_node_pid() {
    local pid
    for pid in $(sandbox_pids slurmd); do
        [[ $(ip netns identify "$pid" 2>/dev/null) == "$SANDBOX_NETNS_PREFIX$1" ]] && { echo "$pid"; return 0; }
    done
    fail "no slurmd for node$1"
}

# gpu_standin_install I NGPUS [no-uvm] [no-driver]: stand-in GPUs on node I.
gpu_standin_install() {
    local node=$1 gpus=$2 no_uvm=0 no_driver=0 opt
    shift 2
    for opt in "$@"; do
        case $opt in no-uvm) no_uvm=1 ;; no-driver) no_driver=1 ;; esac
    done
    local stage=$GPU_DIR/node$node
    gpu_standin_remove "$node"
    mkdir -p "$stage/dev"
    nsenter -t "$(gpu_node_pid "$node")" -m -- bash -euo pipefail -s -- \
        "$stage" "$gpus" "$no_uvm" "$no_driver" "$GPU_DIR" "$GPU_DRIVER" <<'EOF'
stage=$1 gpus=$2 no_uvm=$3 no_driver=$4 dir=$5 driver=$6
mount -t tmpfs -o mode=0755,nosuid slw-gpu-dev "$stage/dev"
for e in /dev/*; do
    name=${e##*/}
    if mountpoint -q "$e"; then
        mkdir "$stage/dev/$name" && mount --rbind "$e" "$stage/dev/$name"
    else
        cp -a "$e" "$stage/dev/"
    fi
done
for ((i = 0; i < gpus; i++)); do mknod -m 0666 "$stage/dev/nvidia$i" c 1 3; done
ctl=(nvidiactl nvidia-uvm-tools)
((no_uvm)) || ctl+=(nvidia-uvm)
for c in "${ctl[@]}"; do mknod -m 0666 "$stage/dev/$c" c 1 3; done
mkdir "$stage/dev/nvidia-caps" && mknod -m 0444 "$stage/dev/nvidia-caps/nvidia-cap1" c 1 3
mount --move "$stage/dev" /dev
mount -t tmpfs -o mode=0755 slw-gpu-proc /proc/driver
mkdir -p /proc/driver/nvidia/gpus
printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n' "$driver" \
    >/proc/driver/nvidia/version
for ((i = 0; i < gpus; i++)); do
    bus=$(printf '0000:%02x:00.0' $((0x10 + i)))
    mkdir -p "/proc/driver/nvidia/gpus/$bus"
    printf 'Model: \t\t Stand-in GPU\nGPU UUID: \t GPU-standin-%d\nDevice Minor: \t %d\n' "$i" "$i" \
        >"/proc/driver/nvidia/gpus/$bus/information"
done
if ((!no_driver)); then
    mount --bind "$dir/ld.so.cache" /etc/ld.so.cache
    mount -t overlay slw-gpu-bin -o "lowerdir=$dir/bin:/usr/local/bin" /usr/local/bin
fi
EOF
}

# gpu_standin_remove I: node I is a CPU node again (also after an install that stopped halfway).
gpu_standin_remove() {
    local pid
    pid=$(gpu_node_pid "$1") || return 0
    nsenter -t "$pid" -m -- bash -s -- "$GPU_DIR" <<'EOF'
for m in /usr/local/bin /proc/driver /dev; do
    while [[ $(findmnt -n -o SOURCE --mountpoint "$m" | tail -n 1) == slw-gpu-* ]]; do umount -l "$m"; done
done
while grep -q ' /etc/ld.so.cache ' /proc/self/mountinfo; do umount -l /etc/ld.so.cache; done
for m in $(awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo); do umount -l "$m" 2>/dev/null; done
true
EOF
}
