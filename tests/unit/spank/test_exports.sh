#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The plugin must export only the SPANK symbols (docs/conventions.md, "Build"; pyxis
# spank_pyxis.lds).
set -eu
plugin=$1
syms=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort)
[ -n "$syms" ] || { echo "no exported symbols in $plugin"; exit 1; }
bad=$(printf '%s\n' "$syms" | grep -Ev '^(plugin_name|plugin_type|plugin_version|spank_plugin_version|slurm_spank_[a-z_]+)$' || true)
if [ -n "$bad" ]; then echo "unexpected exported symbols:"; echo "$bad"; exit 1; fi
for s in plugin_name plugin_type plugin_version spank_plugin_version slurm_spank_init slurm_spank_task_init; do
  printf '%s\n' "$syms" | grep -qx "$s" || { echo "missing export: $s"; exit 1; }
done
echo "1 passed, 0 failed"
