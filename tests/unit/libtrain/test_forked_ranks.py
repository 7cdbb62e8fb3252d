# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""forked_ranks.py, the rank starter of libtrain's Python suites, reports what a rank did as
`python3 -c CODE` would: the exit status of sys.exit, os._exit and an uncaught exception (1),
its output, "hung" for one killed at the timeout, and the environment it was given plus what the
preloaded imports set; forked and fresh ranks alike. A harness that reported a failed rank as 0
would let every suite pass. Needs no PyTorch: it preloads a module of its own."""
import os
import sys
import tempfile
import time

import forked_ranks

CODE = r'''
import os, sys
what = sys.argv[1]
print("rank says", os.environ.get("WHO"), os.environ.get("SET_BY_IMPORT"), flush=True)
if what == "raise":
    raise ValueError("boom")
if what == "exit3":
    sys.exit(3)
if what == "underscore7":
    os._exit(7)
if what == "hang":
    import time
    time.sleep(60)
'''


def main():
    failures, passed = [], []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        (passed if cond else failures).append(what)

    with tempfile.TemporaryDirectory() as tmp:
        # A module whose import sets a variable, as libtrain.torch's sets USE_LIBUV.
        with open(os.path.join(tmp, "sets_env.py"), "w") as f:
            f.write("import os\nos.environ.setdefault('SET_BY_IMPORT', 'yes')\n")
        sys.path.insert(0, tmp)
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": tmp, "WHO": "rank"}
        for fresh in (False, True):
            how = "fresh" if fresh else "forked"
            if not fresh:
                forked_ranks.preload("sets_env")
            cases = {"ok": 0, "raise": 1, "exit3": 3, "underscore7": 7}
            ranks = {w: forked_ranks.start(CODE + ("import sets_env\n" if fresh else ""), [w], env, fresh=fresh)
                     for w in cases}
            codes = dict(zip(ranks, forked_ranks.wait(list(ranks.values()), 60)))
            for w, want in cases.items():
                check(codes[w] == want, f"{how}: {w} exits {want} (got {codes[w]})")
            out = ranks["ok"].text()
            want_env = "rank says rank None" if fresh else "rank says rank yes"
            check(want_env in out, f"{how}: the rank's output and environment ({out.strip()!r})")
            check("ValueError: boom" in ranks["raise"].text(), f"{how}: an uncaught exception's traceback")
            start = time.monotonic()
            hung = forked_ranks.start(CODE, ["hang"], env, fresh=fresh)
            code = forked_ranks.wait([hung], 1)[0]
            check(code == "hung" and time.monotonic() - start < 10, f"{how}: a rank past the timeout is hung")
            try:
                os.kill(hung.pid, 0)
                check(False, f"{how}: the hung rank was killed")
            except ProcessLookupError:
                check(True, f"{how}: the hung rank was killed")
    print(f"{len(passed)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
