#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# man/spank_slipway.8 must document every option of the plugin's option table and every
# plugstack.conf key of the configuration table (docs/conventions.md: tables drive the docs).
set -eu
options=$1 config=$2 man=$3
names=$(grep -oE 'OptionId::k[A-Za-z]+, "[a-z-]+"' "$options" | sed 's/.*"\(.*\)"/\1/')
keys=$(grep -oE 'ConfigKey\{"[a-z_]+"' "$config" | sed 's/.*"\(.*\)"/\1/')
[ -n "$names" ] && [ -n "$keys" ] || { echo "could not read the tables"; exit 1; }
missing=0
for n in $names; do
  grep -q "^\.BI\? \\\\-\\\\-$(echo "$n" | sed 's/-/\\\\-/g')" "$man" || { echo "man page lacks --$n"; missing=1; }
done
for k in $keys; do
  grep -q "^\.BI $k=" "$man" || { echo "man page lacks plugstack key $k"; missing=1; }
done
[ $missing = 0 ] && echo "1 passed, 0 failed"
exit $missing
