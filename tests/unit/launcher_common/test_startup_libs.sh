#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# What `slipway` and the plugin load at start (bench/launch): libcurl, libarchive, libcrypto,
# libseccomp and ISA-L are opened with dlopen on first use, never linked; `slipway` carries its
# libstdc++ and needs only libc (and the dynamic loader). Usage: test_startup_libs.sh SLIPWAY PLUGIN
set -eu
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -v '^ld-linux' | sort | tr '\n' ' '; }
fail=0
got=$(needed "$1")
[ "$got" = "libc.so.6 " ] || { echo "slipway needs: $got(want only libc.so.6)"; fail=1; }
got=$(needed "$2")
for lib in libcurl libarchive libcrypto libseccomp libisal; do
  case " $got" in *" $lib"*) echo "plugin links $lib at start: $got"; fail=1 ;; esac
done
[ $fail -eq 0 ] && echo "2 passed, 0 failed"
exit $fail
