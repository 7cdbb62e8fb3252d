#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Builds the GPU node check's bundle: everything gpu-node-check.sh needs on a bare GPU node with no
# network, no Slurm and no package manager. `slipway` with the libraries it loads (libarchive,
# libcurl, libcrypto, libseccomp, ISA-L and theirs) beside it in lib/; libtrain's GPU tests with
# libtrain.so, NCCL and the CUDA runtime; and a small OCI image (busybox, the C/C++ runtime, the
# CUDA test program cuda_check.cu with the NVIDIA_* Env of an NGC image) for `slipway run`.
#   make-bundle.sh BUILD_DIR OUT_DIR      (BUILD_DIR: a build of this repository with CUDA/NCCL)
# Then: tar -C OUT_DIR/.. -czf gpu-node-check.tar.gz $(basename OUT_DIR), copy, unpack, run
# OUT_DIR/gpu-node-check.sh on the node.
set -euo pipefail
build=$(cd "$1" && pwd) out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
die() { echo "make-bundle: $*" >&2; exit 1; }
[[ -x $build/launcher/slipway ]] || die "no $build/launcher/slipway: build the repository first"
[[ -x $nvcc ]] || die "no nvcc at $nvcc (set NVCC): the CUDA test program needs it"
rm -rf "$out" && mkdir -p "$out"/{bin,lib}

# glibc's own libraries come from the node (any glibc at least as new as the build machine's).
is_glibc() { [[ $1 =~ ^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec)\.so ]]; }
# copy_with_deps FILE...: FILEs' shared libraries (as the build machine resolves them) into lib/.
copy_with_deps() {
    local f name path
    for f in "$@"; do
        while read -r name _ path _; do
            [[ $path == /* ]] && ! is_glibc "$name" || continue
            [[ -e $out/lib/$name ]] || cp -L "$path" "$out/lib/$name"
        done < <(ldd "$f" 2>/dev/null | grep '=>')
    done
}
cp "$build/launcher/slipway" "$out/bin/"
# The libraries slipway opens with dlopen on first use (launcher/common/lazy_library.h).
for soname in libarchive.so.13 libcurl.so.4 libcrypto.so.3 libseccomp.so.2 libisal.so.2; do
    path=$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64/ && !found { print $NF; found = 1 }')
    [[ -n $path ]] || { echo "make-bundle: warning: $soname not found" >&2; continue; }
    cp -L "$path" "$out/lib/$soname"
    copy_with_deps "$path"
done
for t in tests/unit/libtrain/libtrain_test_nccl tests/unit/launcher_dl/test_dl_gpu_real; do
    [[ -x $build/$t ]] || die "no $build/$t"
    cp "$build/$t" "$out/bin/"
    copy_with_deps "$build/$t"
done
cp -P "$build"/libtrain/libtrain.so* "$out/lib/"
copy_with_deps "$build"/libtrain/libtrain.so
# The gpu-standin cases (test_gpu_standin.cc, written against CUDA's and NCCL's headers), to run
# against the real libraries: the binary alone. It was linked against the build's stand-in
# libnccl.so.2 and libcudart.so.13, whose real namesakes libtrain brought into lib/ above
# (LD_LIBRARY_PATH comes before the binary's RUNPATH).
t=tests/unit/libtrain/libtrain_test_gpu_standin
[[ -x $build/$t ]] || die "no $build/$t"
cp "$build/$t" "$out/bin/"

# The image: busybox, the C/C++ runtime with an ld.so cache, /usr/bin/cuda-check.
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,dev,proc,sys,run,root,home,lib64,usr/lib/x86_64-linux-gnu}
install -d -m 1777 "$rootfs/tmp"
install -m 0755 /bin/busybox "$rootfs/bin/busybox"
for applet in $(/bin/busybox --list-full); do
    [[ $applet == bin/busybox ]] || ln -sf /bin/busybox "$rootfs/$applet"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/lib64/"
for l in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libstdc++.so.6 libgcc_s.so.1; do
    cp -L "/lib/x86_64-linux-gnu/$l" "$rootfs/usr/lib/x86_64-linux-gnu/"
done
# sm_80 and sm_90 code, and PTX for newer GPUs; the static CUDA runtime (nvcc's default).
"$nvcc" -O2 -gencode arch=compute_80,code=sm_80 -gencode 'arch=compute_90,code=[sm_90,compute_90]' \
    -o "$rootfs/usr/bin/cuda-check" "$here/cuda_check.cu"
echo /usr/lib/x86_64-linux-gnu >"$rootfs/etc/ld.so.conf"
ldconfig -r "$rootfs"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\n' >"$rootfs/etc/group"
"$repo/contrib/images/oci_pack.py" "$out/image" latest --layer "$rootfs" --root-owned --mtime 0 \
    --env PATH=/usr/local/nvidia/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env NVIDIA_VISIBLE_DEVICES=all --env NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    --env LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 \
    --env 'NVIDIA_REQUIRE_CUDA=cuda>=13.0' >/dev/null
install -m 0755 "$here/gpu-node-check.sh" "$out/gpu-node-check.sh"
echo "make-bundle: $out ($(du -sh "$out" | cut -f1)); run $out/gpu-node-check.sh on a GPU node"
