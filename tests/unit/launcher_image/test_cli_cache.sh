#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# `slipway images`, `check` and `gc` on a cache not made yet: an empty answer (check says nothing,
# images only its header, gc "nothing cached"), and a named image is "not in the cache", never a
# raw "read .../images" error. Usage: test_cli_cache.sh SLIPWAY
set -eu
slipway=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export SLIPWAY_CACHE_DIR="$dir/never-made"
fail=0 passed=0
check() {  # NAME WANT_RC WANT_OUTPUT COMMAND...
  name=$1 want_rc=$2 want=$3
  shift 3
  rc=0
  out=$("$slipway" "$@" 2>&1) || rc=$?
  if [ "$rc" = "$want_rc" ] && [ "$out" = "$want" ]; then passed=$((passed + 1)); else
    echo "FAIL $name: rc $rc, output '$out' (want rc $want_rc, '$want')"; fail=$((fail + 1)); fi
}
check "check, all" 0 "" check
check "check, named" 1 "slipway: no image 'busybox' in the cache $SLIPWAY_CACHE_DIR; see 'slipway images'" check busybox
check "gc" 0 "nothing cached in $SLIPWAY_CACHE_DIR" gc --keep 1G
header=$("$slipway" images 2>&1)
case "$header" in DIGEST*IMAGE) passed=$((passed + 1)) ;; *) echo "FAIL images: '$header'"; fail=$((fail + 1)) ;; esac
[ -e "$SLIPWAY_CACHE_DIR" ] && { echo "FAIL: the cache was made"; fail=$((fail + 1)); }
echo "$passed passed, $fail failed"
[ $fail -eq 0 ]
