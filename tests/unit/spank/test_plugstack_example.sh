#!/bin/sh
# contrib/plugstack.conf.d/slipway.conf must use only keys the plugin knows (spank/config.cc).
set -eu
example=$1 config=$2
keys=$(grep -oE 'ConfigKey\{"[a-z_]+"' "$config" | sed 's/.*"\(.*\)"/\1/')
used=$(grep -E '^[[:space:]]*#?[[:space:]]*(required|optional)|^#[[:space:]]+[a-z_]+=' "$example" |
       grep -oE '[a-z_]+=' | tr -d '=' | sort -u)
[ -n "$used" ] || { echo "no keys found in $example"; exit 1; }
for k in $used; do
  printf '%s\n' $keys | grep -qx "$k" || { echo "$example uses unknown key $k"; exit 1; }
done
echo "1 passed, 0 failed"
