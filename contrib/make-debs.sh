#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Builds Slipway's Debian packages (slipway, slurm-spank-slipway, libtrain0, libtrain-dev,
# python3-libtrain) with CPack and copies them to OUTDIR; prints their paths.
#   contrib/make-debs.sh OUTDIR                   for this machine's Debian (12: 0.1.0-1~deb12),
#       from SLIPWAY_BUILD_DIR (default <repo>/build)
#   contrib/make-debs.sh --release trixie OUTDIR  for Debian 13 (0.1.0-1~deb13), built against its
#       Slurm inside contrib/release-root's trixie root, in SLIPWAY_BUILD_DIR (default
#       <repo>/build-trixie), configured without the tests (what the packages hold only), with ccache
# Needs dpkg-dev for dpkg-shlibdeps (contrib/install-deps.sh installs it; the trixie root has its own).
set -euo pipefail

die() { echo "make-debs: $*" >&2; exit 1; }
usage() { sed -n '4,11s/^# \{0,1\}//p' "$0"; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
release=
if [[ ${1:-} == --release ]]; then
    (($# >= 2)) || usage
    release=$2
    shift 2
fi
(($# == 1)) && [[ $1 != -h && $1 != --help ]] || usage
out=$(mkdir -p "$1" && cd "$1" && pwd) || die "cannot create OUTDIR '$1'"

# Another release: this script again, inside that release's root. Its /var is still this
# machine's, so dpkg-shlibdeps asks the root's dpkg database (DPKG_ADMINDIR) which of the
# release's packages holds each library.
if [[ -n $release && ${SLIPWAY_RELEASE:-} != "$release" ]]; then
    root=$("$repo/contrib/release-root" path "$release") || die "no $release root (contrib/release-root path $release failed)"
    exec "$repo/contrib/release-root" enter "$release" env DPKG_ADMINDIR="$root/var/lib/dpkg" \
        SLIPWAY_BUILD_DIR="${SLIPWAY_BUILD_DIR:-$repo/build-$release}" "$0" --release "$release" "$out"
fi
build=${SLIPWAY_BUILD_DIR:-$repo/build}

command -v dpkg-shlibdeps >/dev/null || die "dpkg-shlibdeps is missing; install dpkg-dev (contrib/install-deps.sh)"
if [[ ! -f $build/CMakeCache.txt ]]; then
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
    if [[ -n $release ]]; then
        args+=(-DSLIPWAY_BUILD_TESTS=OFF -DSLIPWAY_BUILD_BENCH=OFF)
        ! command -v ccache >/dev/null || args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    fi
    cmake -S "$repo" -B "$build" "${args[@]}" >/dev/null
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
cp -f "${debs[@]}" "$out/"
for deb in "${debs[@]}"; do echo "$out/$(basename "$deb")"; done
