#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Installs the Debian 12 packages Slipway needs to build, test and run its sandbox. Safe to run
# twice: when everything is already installed it asks apt nothing.
set -euo pipefail

packages=(
  # build (ccache: contrib/run-tests.sh's builds reuse the last run's objects)
  build-essential cmake pkg-config check ccache
  libcurl4-openssl-dev libarchive-dev libssl-dev libzstd-dev libdeflate-dev libisal-dev
  libseccomp-dev nlohmann-json3-dev libslurm-dev libpmix-dev libpmix2 pybind11-dev python3-dev
  python3-numpy libopenmpi-dev libgloo-dev
  # libtrain.torch and its unit tests (Debian's PyTorch 1.13, CPU, with Gloo)
  python3-torch python3-torchvision
  # the sandbox cluster and its registry
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge iproute2 docker-registry skopeo
  umoci debootstrap busybox-static jq procps psmisc util-linux openmpi-bin curl ca-certificates
  # squashfs images (enroot's format): squashfuse_ll mounts them, rdsquashfs reads their config,
  # sqfs2tar unpacks them where FUSE is not usable, mksquashfs makes the test ones and
  # --container-save=*.sqsh
  squashfs-tools squashfs-tools-ng squashfuse
  # local package repositories for the package-manager tests (apt's is written by hand)
  rpm createrepo-c
  # Debian packages of Slipway (contrib/make-debs.sh): dpkg-shlibdeps, lintian; the install test
  # loads the module file with environment-modules; rpmlint for the EL9 RPMs (contrib/make-rpms.sh,
  # rpmbuild is the rpm package above)
  dpkg-dev lintian environment-modules rpmlint
  # tests/fuzz: clang with libFuzzer's runtime (libclang-rt-14-dev, only recommended by clang),
  # llvm for llvm-symbolizer in sanitizer reports
  clang libclang-rt-14-dev llvm
  # benchmarks' peers, podman:// images, and examples' data. netavark: podman 4.3 uses the network
  # backend its store records, and Debian 13's podman 5 (the Slurm 24.11 tests, on the same user's
  # store) records netavark; without netavark every later podman command fails ("could not find
  # netavark"), as it did in CI.
  charliecloud bubblewrap podman netavark uidmap dataset-fashion-mnist apache2-utils openssl zstd pigz
)

# Squashfs images are mounted with FUSE in the job's user namespace: users need /dev/fuse read and
# write, mode 0666 as Debian's udev rules leave it. Machines without udev (this VM, CI containers)
# keep the kernel's 0600; squashfs images would then be unpacked instead (the unit tests expect the
# mount). Only root can change it.
fuse_for_users() {
  if [[ -c /dev/fuse && $(stat -c %a /dev/fuse) != 666 && $(id -u) == 0 ]]; then
    chmod 0666 /dev/fuse
  fi
}
trap fuse_for_users EXIT

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}); run as root: $0" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
