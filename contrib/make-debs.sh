#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Builds Slipway's Debian packages (slipway, slurm-spank-slipway, libtrain0, libtrain-dev,
# python3-libtrain) with CPack from this tree and copies them to OUTDIR; prints their paths.
#   contrib/make-debs.sh OUTDIR      (SLIPWAY_BUILD_DIR: the build to use, default <repo>/build)
# Needs dpkg-dev for dpkg-shlibdeps (contrib/install-deps.sh installs it).
set -euo pipefail

die() { echo "make-debs: $*" >&2; exit 1; }

(($# == 1)) && [[ $1 != -h && $1 != --help ]] || { sed -n '4,7s/^# \{0,1\}//p' "$0"; exit 2; }
out=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SLIPWAY_BUILD_DIR:-$repo/build}

command -v dpkg-shlibdeps >/dev/null || die "dpkg-shlibdeps is missing; install dpkg-dev (contrib/install-deps.sh)"
if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
# CPack writes to BUILD/debs (cmake/SlipwayPackaging.cmake); clear it so that only this
# version's packages are copied.
rm -rf "$build/debs"
cmake --build "$build" -j"$(nproc)" --target package >&2 || die "cmake --build $build --target package failed"
shopt -s nullglob
debs=("$build"/debs/*.deb)
((${#debs[@]} == 5)) || die "expected 5 packages in $build/debs, found ${#debs[@]}"
# NCCL comes from NVIDIA's CUDA install, not from a Debian package: dpkg-shlibdeps cannot name it.
if readelf -d "$build"/libtrain/libtrain.so.* 2>/dev/null | grep -q 'libnccl\.so'; then
    echo "make-debs: warning: libtrain0 links NCCL, which is in no Debian package and so not in its" \
        "Depends: nodes need libnccl.so.2 and libcudart in the loader's path; for packages without" \
        "NCCL, configure $build with -DLIBTRAIN_WITH_NCCL=OFF" >&2
fi
mkdir -p "$out"
cp -f "${debs[@]}" "$out/"
for deb in "${debs[@]}"; do echo "$(cd "$out" && pwd)/$(basename "$deb")"; done
