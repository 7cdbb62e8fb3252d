#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# `cmake --install BUILD --prefix TMP` installs what the packages hold under TMP and nothing
# elsewhere: the command (and --version), man pages, the module file with `root` = TMP, the plugin
# with the plugstack example naming its installed path, libtrain and its Python module.
#   test_install.sh CMAKE BUILD VERSION LIBDIR PLUGIN_DIR
set -euo pipefail
cmake=$1 build=$2 version=$3 libdir=$4 plugin_dir=$5
prefix=$(mktemp -d /tmp/slipway-install-test.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
failures=0
check() {               # check WHAT CMD...: CMD must succeed
    local what=$1
    shift
    if ! "$@" >/dev/null 2>&1; then echo "FAIL: $what"; failures=$((failures + 1)); fi
}

"$cmake" --install "$build" --prefix "$prefix" >"$prefix.log" 2>&1 || { cat "$prefix.log"; rm -f "$prefix.log"; exit 1; }
rm -f "$prefix.log"

# Nothing outside the prefix: the manifest lists every file the install wrote.
outside=$(grep -v "^$prefix/" "$build/install_manifest.txt" || true)
[[ -z $outside ]] || { echo "FAIL: installed outside $prefix: $outside"; failures=$((failures + 1)); }

check "bin/slipway --version prints $version" grep -qx "slipway $version" <("$prefix/bin/slipway" --version)
for page in man1/slipway.1 man8/spank_slipway.8 man3/libtrain.3 man7/libtrain.7; do
    check "$page.gz is a gzip man page" gzip -t "$prefix/share/man/$page.gz"
done
plugin=$prefix/$plugin_dir/spank_slipway.so
check "plugin at $plugin" test -f "$plugin"
conf=$prefix/etc/slurm/plugstack.conf.d/slipway.conf
check "plugstack example names $plugin" grep -q "^#required $plugin " "$conf"
check "plugstack example is all comments" bash -c "! grep -vE '^[[:space:]]*(#|\$)' '$conf'"
module=$prefix/share/modules/modulefiles/slipway
check "module file sets root to $prefix" grep -qx "set root $prefix" "$module"
check "module file has no placeholder left" bash -c "! grep -q @SLIPWAY '$module'"
check "module file puts $prefix/bin on PATH" grep -qE 'prepend-path +PATH +\$root/bin' "$module"
check "module file puts the man pages on MANPATH" test -d "$prefix/share/man"
check "libtrain.so.0" test -L "$prefix/$libdir/libtrain.so.0"
check "libtrain.so (dev link)" test -L "$prefix/$libdir/libtrain.so"
check "libtrain headers" test -f "$prefix/include/libtrain/libtrain.h"
check "libtrain.pc" test -f "$prefix/$libdir/pkgconfig/libtrain.pc"
check "libtrain CMake package" test -f "$prefix/$libdir/cmake/libtrain/libtrainConfig.cmake"
check "Python module" test -f "$prefix/lib/python3/dist-packages/libtrain/__init__.py"
check "Python module libtrain.torch" test -f "$prefix/lib/python3/dist-packages/libtrain/torch/_optimizer.py"
check "LIBTRAIN_HOROVOD hook" grep -q '__import__("_libtrain_horovod").install()' "$prefix/lib/python3/dist-packages/libtrain-horovod.pth"
check "LIBTRAIN_HOROVOD stand-in horovod.torch" test -f "$prefix/lib/python3/dist-packages/_libtrain_horovod/horovod/torch/__init__.py"
for pkg in slipway slurm-spank-slipway libtrain0 libtrain-dev python3-libtrain; do
    check "$pkg copyright" test -s "$prefix/share/doc/$pkg/copyright"
    check "$pkg changelog" gzip -t "$prefix/share/doc/$pkg/changelog.Debian.gz"
done

# With environment-modules installed, load the module for real; without it, the checks above stand.
if [[ -r /usr/share/modules/init/bash ]]; then
    check "module load slipway puts slipway on PATH" bash -c "source /usr/share/modules/init/bash &&
        module use '$prefix/share/modules/modulefiles' && module load slipway &&
        [[ \$(command -v slipway) == '$prefix/bin/slipway' ]]"
else
    echo "note: environment-modules not installed; module file checked as text only"
fi
if ((failures)); then echo "$failures failed"; exit 1; fi
echo "all install checks passed"
