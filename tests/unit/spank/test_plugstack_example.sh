#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# contrib/plugstack.conf.d/slipway.conf must use only keys the plugin knows (spank/config.cc), and
# be fully commented out: the slurm-spank-slipway package installs it in /etc/slurm/plugstack.conf.d,
# which Debian's plugstack.conf includes, and installing a package must not change a running cluster.
set -eu
example=$1 config=$2
keys=$(grep -oE 'ConfigKey\{"[a-z_]+"' "$config" | sed 's/.*"\(.*\)"/\1/')
used=$(grep -E '^[[:space:]]*#?[[:space:]]*(required|optional)|^#[[:space:]]+[a-z_]+=' "$example" |
       grep -oE '[a-z_]+=' | tr -d '=' | sort -u)
active=$(grep -vE '^[[:space:]]*(#|$)' "$example" || true)
[ -z "$active" ] || { echo "$example has lines that are not comments (comment them out): $active"; exit 1; }
[ -n "$used" ] || { echo "no keys found in $example"; exit 1; }
for k in $used; do
  printf '%s\n' $keys | grep -qx "$k" || { echo "$example uses unknown key $k"; exit 1; }
done
echo "1 passed, 0 failed"
