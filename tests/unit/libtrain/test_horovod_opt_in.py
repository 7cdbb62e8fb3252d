# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""LIBTRAIN_HOROVOD=1 (libtrain-horovod.pth, _libtrain_horovod): under it `import horovod` and
`import horovod.torch as hvd` resolve to libtrain; without it nothing of the stand-in is imported
and `horovod` is not found; a real Horovod on sys.path is never shadowed (one stderr line says it
is used). Each case is a fresh interpreter whose user site-packages holds the build tree's .pth and
stand-in, so the .pth runs at start-up as it does in dist-packages.
    usage: test_horovod_opt_in.py BUILD_PYTHON_DIR"""
import os
import subprocess
import sys
import tempfile
import textwrap

BUILD = os.path.abspath(sys.argv[1])
FAILED = []


def run(code, env=None, path=()):
    """Runs `code` in a fresh interpreter; returns (exit status, stdout, stderr)."""
    full = dict(os.environ, PYTHONUSERBASE=USERBASE, PYTHONPATH=os.pathsep.join([*path, BUILD]),
                LIBTRAIN_BOOTSTRAP="single")
    full.pop("LIBTRAIN_HOROVOD", None)
    full.update(env or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True,
                       text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def case(name, code, env=None, path=(), want_stderr=None):
    code_, out, err = run(code, env, path)
    ok = code_ == 0 and (want_stderr is None or want_stderr(err))
    print(f"{'ok' if ok else 'FAILED'} {name}")
    if not ok:
        FAILED.append(name)
        print(f"  exit {code_}\n  stdout: {out}\n  stderr: {err}")


def user_site():
    code, out, err = run("import site; print(site.getusersitepackages())")
    assert code == 0, err
    return out.strip()


def has_torch():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


with tempfile.TemporaryDirectory() as tmp:
    USERBASE = os.path.join(tmp, "userbase")
    site_dir = user_site()
    os.makedirs(site_dir)
    for name in ("libtrain-horovod.pth", "_libtrain_horovod"):
        os.symlink(os.path.join(BUILD, name), os.path.join(site_dir, name))
    real = os.path.join(tmp, "real")  # a stand-in for a real Horovod install
    os.makedirs(os.path.join(real, "horovod", "torch"))
    with open(os.path.join(real, "horovod", "__init__.py"), "w") as f:
        f.write("REAL = True\n")
    open(os.path.join(real, "horovod", "torch", "__init__.py"), "w").close()

    case("off by default: horovod is not found and the stand-in is not imported", """
        import sys
        try:
            import horovod
            raise SystemExit(f"imported {horovod.__file__}")
        except ModuleNotFoundError:
            pass
        assert "_libtrain_horovod" not in sys.modules and "libtrain" not in sys.modules
        """)
    case("LIBTRAIN_HOROVOD=0 is off", """
        try:
            import horovod
            raise SystemExit("imported")
        except ModuleNotFoundError:
            pass
        """, {"LIBTRAIN_HOROVOD": "0"})
    case("LIBTRAIN_HOROVOD=1: import horovod is the stand-in, without torch or libtrain", """
        import importlib.util, sys
        import horovod
        assert horovod.__libtrain__ and horovod.__version__.startswith("0.28"), horovod.__version__
        assert horovod.__file__.endswith("_libtrain_horovod/horovod/__init__.py"), horovod.__file__
        assert "torch" not in sys.modules and "libtrain" not in sys.modules
        spec = importlib.util.find_spec("horovod.torch")
        assert spec.origin.endswith("_libtrain_horovod/horovod/torch/__init__.py"), spec.origin
        try:
            horovod.run(print, np=2)
            raise SystemExit("horovod.run returned")
        except RuntimeError as e:
            assert "srun" in str(e) and "\\n" not in str(e), e
        """, {"LIBTRAIN_HOROVOD": "1"})
    case("LIBTRAIN_HOROVOD=1: other horovod modules fail in one line", """
        for name in ("horovod.tensorflow", "horovod.torch.elastic"):
            try:
                __import__(name)
                raise SystemExit(f"imported {name}")
            except ModuleNotFoundError as e:
                assert "libtrain" in str(e) and name in str(e) and "\\n" not in str(e), e
        """, {"LIBTRAIN_HOROVOD": "1"})
    case("LIBTRAIN_HOROVOD=yes is refused at import horovod", """
        try:
            import horovod
            raise SystemExit("imported")
        except ImportError as e:
            assert "LIBTRAIN_HOROVOD='yes'" in str(e) and "\\n" not in str(e), e
        """, {"LIBTRAIN_HOROVOD": "yes"})
    one_line = lambda err: err.count("\n") == 1 and "LIBTRAIN_HOROVOD=1 ignored" in err and real in err
    case("a real Horovod on PYTHONPATH wins, with one line", """
        import horovod, horovod.torch
        assert horovod.REAL and not hasattr(horovod, "__libtrain__")
        """, {"LIBTRAIN_HOROVOD": "1"}, path=[real], want_stderr=one_line)
    case("a real Horovod put on sys.path at run time wins, with one line", f"""
        import sys
        sys.path.append({real!r})
        import horovod
        assert horovod.REAL
        """, {"LIBTRAIN_HOROVOD": "1"}, want_stderr=one_line)
    case("without the opt-in a real Horovod is used silently", """
        import horovod
        assert horovod.REAL
        """, path=[real], want_stderr=lambda err: err == "")
    if has_torch():
        case("LIBTRAIN_HOROVOD=1: import horovod.torch as hvd is libtrain.torch", """
            import torch
            import horovod.torch as hvd
            import libtrain.torch
            assert hvd.DistributedOptimizer is libtrain.torch.DistributedOptimizer
            assert hvd.Compression.fp16 is libtrain.torch.Compression.fp16 and hvd.Adasum == "adasum"
            hvd.init()
            assert (hvd.rank(), hvd.size(), hvd.local_rank()) == (0, 1, 0)
            assert hvd.allreduce(torch.tensor([1.0, 2.0]), name="avg").tolist() == [1.0, 2.0]
            assert not hvd.mpi_built() and hvd.nccl_built() in (True, False)
            from horovod.torch import broadcast_optimizer_state, DistributedOptimizer
            try:
                hvd.elastic
                raise SystemExit("hvd.elastic exists")
            except AttributeError as e:
                assert "libtrain" in str(e) and "\\n" not in str(e), e
            """, {"LIBTRAIN_HOROVOD": "1"})
    else:
        print("skipped: import horovod.torch (no PyTorch for this interpreter)")

print(f"{'FAILED: ' + ', '.join(FAILED) if FAILED else 'all passed'}")
sys.exit(1 if FAILED else 0)
