# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Local ranks for libtrain's Python suites, forked from the suite's process after it imported
PyTorch and libtrain once (preload), instead of a fresh `python3 -c CODE` each: on 2 cores every
fresh rank spent seconds importing PyTorch, most of the suites' time. A forked rank gets the
environment it is given, plus what the imports set in this one (libtrain.torch's USE_LIBUV=0 where
PyTorch lacks libuv, LIBTRAIN_COMPUTE_THREADS, ...), as a fresh interpreter would after the same
imports; and it exits with the status `python3 -c CODE` would (1 for an uncaught exception).
What a fresh interpreter does that a fork does not: the interpreter's own exit (finalizers,
atexit; a rank leaves with os._exit once CODE ends) and CUDA (it does not survive a fork). Suites
start those scenarios with start(..., fresh=True)."""
import os
import subprocess
import sys
import threading
import time
import traceback

# What the imports of preload() added to the environment; None until preload() ran.
_set_by_import = None


def preload(*modules):
    """Imports MODULES here, once, for the forked ranks. Nothing may compute with torch in this
    process before the forks: its thread pools would be copied half-made."""
    global _set_by_import
    os.environ["OMP_NUM_THREADS"] = "1"  # as every rank has it, before torch reads it
    before = dict(os.environ)
    import importlib
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            if name in ("torch", "libtrain"):
                raise
            # an optional one (torchvision): a rank that needs it fails there, as a fresh one would
    _set_by_import = {k: v for k, v in os.environ.items() if before.get(k) != v}


class Rank:
    """One started rank: pid, and (captured) its stdout and stderr as they come."""

    def __init__(self, pid, fd=None, proc=None):
        self.pid, self.fd, self.proc = pid, fd, proc
        self.output = bytearray()
        self.code = None
        self._reader = None
        if fd is not None:
            self._reader = threading.Thread(target=self._drain, daemon=True)
            self._reader.start()

    def _drain(self):
        while True:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                break
            self.output += chunk
        os.close(self.fd)

    def poll(self):
        if self.code is None:
            if self.proc is not None:
                self.code = self.proc.poll()
            else:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.code = os.waitstatus_to_exitcode(status)
        return self.code

    def kill(self):
        if self.poll() is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass
            if self.proc is not None:
                self.code = self.proc.wait()
            else:
                self.code = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])

    def text(self):
        """What the rank wrote, once it exited (captured ranks)."""
        if self._reader is not None:
            self._reader.join(5)  # a helper the rank left behind may hold the pipe open
        return self.output.decode(errors="replace")


def start(code, argv, env, capture=True, fresh=False):
    """CODE as a rank with sys.argv[1:] = ARGV and ENV as its whole environment; its stdout and
    stderr captured (Rank.text) or this process's. Forked after preload(), unless FRESH (or no
    preload): then `python3 -c CODE ARGV...`."""
    if fresh or _set_by_import is None:
        p = subprocess.Popen([sys.executable, "-c", code, *argv], env=env,
                             stdout=subprocess.PIPE if capture else None,
                             stderr=subprocess.STDOUT if capture else None)
        fd = None
        if capture:
            fd = os.dup(p.stdout.fileno())
            p.stdout.close()
        return Rank(p.pid, fd=fd, proc=p)
    env = dict(env)
    for k, v in _set_by_import.items():
        env.setdefault(k, v)
    rfd = wfd = None
    if capture:
        rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the rank: never returns
        status = 1
        try:
            if capture:
                os.close(rfd)
                os.dup2(wfd, 1)
                os.dup2(wfd, 2)
                os.close(wfd)
            os.environ.clear()
            os.environ.update(env)
            sys.argv = ["-c", *argv]
            try:
                exec(compile(code, "<rank>", "exec"), {"__name__": "__main__"})
                status = 0
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
    if capture:
        os.close(wfd)
    return Rank(pid, fd=rfd)


def wait(ranks, timeout):
    """Waits up to TIMEOUT seconds for every rank; kills those still running then. Returns each
    rank's exit status, "hung" for a killed one."""
    deadline = time.monotonic() + timeout
    while any(r.poll() is None for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.02)
    codes = []
    for r in ranks:
        if r.poll() is None:
            r.kill()
            codes.append("hung")
        else:
            codes.append(r.code)
    return codes
