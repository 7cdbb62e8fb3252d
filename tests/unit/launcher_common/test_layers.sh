#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The layers of launcher/ include only what they may use (docs/architecture.md, "The pieces and
# who owns what"): a file of LAYER that includes "OTHER/..." fails this test unless OTHER is in
# LAYER's row below. The link check (layer_check_* in launcher/CMakeLists.txt) catches calls; this
# catches includes, which a header-only use would pass through. Also: spank/ and libtrain/ are
# included by no layer, and libtrain/ includes nothing of launcher/.
#   test_layers.sh REPO_DIR
set -euo pipefail
repo=${1:?usage: test_layers.sh REPO_DIR}
declare -A allowed=(
    [common]=""
    [image]="common"
    [runtime]="common"
    [dl]="common runtime"
    [options]="common image runtime"
    [step]="common image runtime dl options"
    [cli]="common image runtime dl options step"
)
bad=0
for layer in "${!allowed[@]}"; do
    for f in "$repo/launcher/$layer"/*.h "$repo/launcher/$layer"/*.cc; do
        [[ -e $f ]] || continue
        while IFS= read -r inc; do
            other=${inc%%/*}
            [[ $other == "$layer" || -z ${allowed[$other]+set} && $other != spank ]] && continue
            if [[ " ${allowed[$layer]} " != *" $other "* ]]; then
                echo "${f#"$repo"/}: includes \"$inc\": launcher/$layer may use only: ${allowed[$layer]:-nothing}"
                bad=1
            fi
        done < <(sed -n 's/^#include "\([a-z_]*\/[^"]*\)".*/\1/p' "$f")
    done
done
if grep -rn '#include "\(common\|image\|runtime\|dl\|options\|step\|cli\)/' "$repo/libtrain" >/dev/null 2>&1; then
    grep -rn '#include "\(common\|image\|runtime\|dl\|options\|step\|cli\)/' "$repo/libtrain" | sed 's/^/libtrain includes launcher: /'
    bad=1
fi
((bad == 0)) && echo "layers: every include of launcher/ runs down the layers"
exit $bad
