#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Builds the RPMs of contrib/rpm/slipway.spec (slipway, slurm-spank-slipway, libtrain,
# libtrain-devel, python3-libtrain, and the source RPM) from this tree and copies them to OUTDIR;
# prints their paths. The source tarball holds the tree's files as git lists them (committed or
# not, ignored ones left out), as a release tarball would.
#   contrib/make-rpms.sh OUTDIR      rpmbuild -ba, on EL9 with the spec's BuildRequires installed
#   contrib/make-rpms.sh --check-on-debian OUTDIR
#       rpmbuild -ba --nodeps --without check on Debian, against Debian's Slurm and libraries
#       (no EL9 system here): checks that the spec parses, builds, installs and packages every
#       file, as contrib/run-tests.sh does; with ccache.
set -euo pipefail

die() { echo "make-rpms: $*" >&2; exit 1; }
usage() { sed -n '4,12s/^# \{0,1\}//p' "$0"; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
spec=$repo/contrib/rpm/slipway.spec
args=()
if [[ ${1:-} == --check-on-debian ]]; then
    args=(--nodeps --without check)
    shift
fi
(($# == 1)) && [[ $1 != -h && $1 != --help ]] || usage
out=$(mkdir -p "$1" && cd "$1" && pwd) || die "cannot create OUTDIR '$1'"
command -v rpmbuild >/dev/null || die "rpmbuild is missing; install rpm-build (EL9) or rpm (Debian)"

# The spec's version is the CMake project's: a tarball of another version would not be found.
version=$(sed -n 's/^project(slipway VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
spec_version=$(rpmspec -q --srpm --qf '%{VERSION}' "$spec" 2>/dev/null) \
    || die "rpmspec cannot parse $spec: run 'rpmspec -P $spec' to see why"
[[ $spec_version == "$version" ]] \
    || die "$spec has Version $spec_version but CMakeLists.txt's project is $version; update the spec"

top=$(mktemp -d /tmp/slipway-rpmbuild.XXXXXX)
trap 'rm -rf "$top"' EXIT
mkdir -p "$top/SOURCES"
git -C "$repo" ls-files -z --cached --others --exclude-standard |
    (cd "$repo" && xargs -0 stat --printf '%n\0' 2>/dev/null) |
    tar -C "$repo" --null -T - --transform "s,^,slipway-$version/," -czf "$top/SOURCES/slipway-$version.tar.gz"
# ccache across runs: the build directory changes each time, the paths below it do not.
if command -v ccache >/dev/null; then
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR=$top/BUILD CCACHE_NOHASHDIR=1
fi
rpmbuild -ba "${args[@]}" --define "_topdir $top" "$spec" >&2 || die "rpmbuild -ba $spec failed"
shopt -s nullglob
rpms=("$top"/RPMS/*/*.rpm "$top"/SRPMS/*.rpm)
# Each package of the spec (EL9 adds -debuginfo and -debugsource ones, kept too).
for name in slipway slurm-spank-slipway libtrain libtrain-devel python3-libtrain; do
    compgen -G "$top/RPMS/*/$name-$version-*.rpm" >/dev/null || die "rpmbuild made no $name RPM"
done
compgen -G "$top/SRPMS/slipway-$version-*.src.rpm" >/dev/null || die "rpmbuild made no source RPM"
cp -f "${rpms[@]}" "$out/"
for rpm in "${rpms[@]}"; do echo "$out/$(basename "$rpm")"; done
