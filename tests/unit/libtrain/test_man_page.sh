#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Every LIBTRAIN_* variable libtrain's sources read must be documented in man/libtrain.7 (an
# ENVIRONMENT entry) and in libtrain/docs/environment.md (its source table), and the man pages
# must render without groff warnings.
set -eu
src=$1 man7=$2 man3=$3 table=$4
vars=$(grep -rhoE '"LIBTRAIN_[A-Z_]+"' "$src/src" "$src/python" | tr -d '"' | sort -u)
[ -n "$vars" ] || { echo "found no LIBTRAIN_ variables under $src"; exit 1; }
missing=0
for v in $vars; do
  grep -qE "^\.B[IR]? $v=" "$man7" || { echo "man/libtrain.7 lacks $v"; missing=1; }
  grep -q "| \`$v\` |" "$table" || { echo "$table lacks $v"; missing=1; }
done
for page in "$man7" "$man3"; do
  warnings=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$page" 2>&1 || true)
  [ -z "$warnings" ] || { echo "$page: $warnings"; missing=1; }
done
[ $missing = 0 ] && echo "$(echo "$vars" | wc -l) variables documented; 1 passed, 0 failed"
exit $missing
