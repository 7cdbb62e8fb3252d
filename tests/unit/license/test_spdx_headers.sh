#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# contrib/spdx-headers in a scratch git repository: --check lists the files without the header
# and the unclassified ones, --add puts the header where each kind wants it (after #!, #%Module and
# a Python coding line; in //, #, /* */ and .\" comments), leaves exempt files and modes alone,
# and a second --add changes nothing. Usage: test_spdx_headers.sh PATH/TO/spdx-headers
set -euo pipefail
script=$(readlink -f "$1")
command -v git >/dev/null || { echo "skipped: git is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
git init -q .
mkdir -p contrib man src contrib/images/foo tests/fuzz/corpus/x
cp "$script" contrib/spdx-headers
passed=0 failed=0
check() {  # check NAME COMMAND...: one assertion
  if "${@:2}"; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}
same() {  # same FILE EXPECTED_TEXT
  diff -u <(printf '%s' "$2") "$1"
}

printf 'int x;\n' >src/a.cc
printf '#pragma once\n' >src/a.h
printf '#!/bin/bash\n# What it does.\necho hi\n' >src/s.sh
chmod 755 src/s.sh
printf '#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n"""Doc."""\n' >src/m.py
printf '"""Doc."""\n' >src/p.py
printf '#!/bin/sh\necho no suffix\n' >src/tool
printf '#%%Module1.0\nset root /usr\n' >contrib/modulefile
printf '.TH X 1\n.SH NAME\nx \\- y\n' >man/x.1
printf "'\\\\\" t\n.TH Y 1\n" >man/y.1
printf 'V1 { global: f; local: *; };\n' >src/v.map
printf 'prefix=@P@\nName: x' >src/x.pc.in
printf '# Doc\n' >README.md
printf 'libtrain\n' >contrib/images/foo/sources
printf 'seed' >tests/fuzz/corpus/x/seed0
printf 'what is this\n' >src/unknown.xyz
printf '// SPDX-License-Identifier: MIT\nint y;\n' >src/foreign.c
git add -A

out=$(contrib/spdx-headers --check 2>&1) && rc=0 || rc=$?
check "--check fails on files without the header" test "$rc" = 1
for f in src/a.cc src/a.h src/s.sh src/m.py src/p.py src/tool contrib/modulefile man/x.1 man/y.1 \
    src/v.map src/x.pc.in contrib/spdx-headers; do
  if [[ $f == contrib/spdx-headers ]]; then
    check "--check accepts $f, which has the header" bash -c '! grep -qx "  $1" <<<"$2"' _ "$f" "$out"
  else
    check "--check lists $f" grep -qx "  $f" <<<"$out"
  fi
done
for f in README.md contrib/images/foo/sources tests/fuzz/corpus/x/seed0; do
  check "--check does not list exempt $f" bash -c '! grep -q "$1" <<<"$2"' _ "$f" "$out"
done
check "--check names the unclassified file" grep -q 'of a kind no rule covers' <<<"$out"
check "--check names the other license" grep -q 'declare another license' <<<"$out"

git rm -q --cached src/unknown.xyz src/foreign.c && rm src/unknown.xyz src/foreign.c
before=$(git ls-files -s)
check "--add succeeds" contrib/spdx-headers --add >/dev/null
H='SPDX-License-Identifier: Apache-2.0' C='Copyright The Slipway authors'
check "C++: // lines first" same src/a.cc "// $H
// $C
int x;
"
check "shell: after #!" same src/s.sh "#!/bin/bash
# $H
# $C
# What it does.
echo hi
"
check "shell: still executable" test -x src/s.sh
check "shell: parses" bash -n src/s.sh
check "python: after #! and the coding line" same src/m.py "#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# $H
# $C
\"\"\"Doc.\"\"\"
"
check "python: compiles" python3 -B -c 'compile(open("src/m.py").read(), "m.py", "exec")'
check "python: docstring kept" python3 -B -c 'import sys; sys.path.insert(0, "src"); import p; assert p.__doc__ == "Doc."'
check "extensionless script by its #!" grep -qx "# $H" src/tool
check "module file: after #%Module" same contrib/modulefile "#%Module1.0
# $H
# $C
set root /usr
"
check "man page: .\\\" comments before .TH" same man/x.1 ".\\\" $H
.\\\" $C
.TH X 1
.SH NAME
x \\- y
"
check "man page: after the preprocessor line" test "$(sed -n 2p man/y.1)" = ".\\\" $H"
check "version script: /* */" test "$(head -n1 src/v.map)" = "/* $H */"
check "x.pc.in as a .pc file, no newline added at its end" same src/x.pc.in "# $H
# $C
prefix=@P@
Name: x"
check "exempt files untouched" same README.md "# Doc
"
check "fuzz seed untouched" same tests/fuzz/corpus/x/seed0 "seed"
check "--check passes after --add" contrib/spdx-headers --check >/dev/null
git add -A
after=$(git ls-files -s)
check "--add changed files" test "$before" != "$after"
check "a second --add adds nothing" bash -c '! contrib/spdx-headers --add | grep -q "^added:"'
check "a second --add changes nothing" git diff --quiet
check "without a git checkout: skipped (77)" bash -c 'mv .git .git.off; contrib/spdx-headers --check 2>/dev/null; rc=$?; mv .git.off .git; test $rc = 77'

echo "$passed passed, $failed failed"
((failed == 0))
