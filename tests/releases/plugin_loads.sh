#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Checks that a spank_slipway.so loads into the Slurm it runs under: `srun --help` (which loads
# plugstack.conf's plugins in srun, no cluster needed) must list the plugin's options. Run it inside
# a release's userland (contrib/release-root enter RELEASE ...) with that release's build of the
# plugin; Slurm refuses a plugin built against another release ("Incompatible plugin version").
#   plugin_loads.sh PLUGIN.so      prints "ok   ..." or "FAIL ..." and exits 0 or 1
set -uo pipefail
(($# == 1)) || { sed -n '8p' "$0" >&2; exit 2; }
plugin=$(readlink -f "$1")
[[ -f $plugin ]] || { echo "FAIL plugin_loads: no plugin at $1"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# A configuration of its own (srun without one looks for a controller in DNS and stops).
printf 'ClusterName=plugin-check\nSlurmctldHost=localhost\nPlugStackConfig=%s\n' "$dir/plugstack.conf" >"$dir/slurm.conf"
echo "required $plugin" >"$dir/plugstack.conf"
export SLURM_CONF=$dir/slurm.conf
version=$(sinfo --version 2>&1)
help=$(srun --help 2>&1)
rc=$?
# Each option on its own line of the plugins' section ("--container-mounts=SRC[...]", the
# "[slipway]" description may follow on the next line).
missing=()
for option in --container-image --container-mounts --container-name --container-workdir --dl-gpus; do
    grep -qE -- "^ +$option(=| |$)" <<<"$help" || missing+=("$option")
done
grep -q '\[slipway\]' <<<"$help" || missing+=("[slipway]")
if ((rc == 0 && ${#missing[@]} == 0)); then
    echo "ok   plugin loads in $version: srun --help lists its options"
    exit 0
fi
echo "FAIL plugin does not load in $version (srun --help: exit $rc; missing ${missing[*]:-nothing}):"
grep -i 'error' <<<"$help" | head -n 5
exit 1
