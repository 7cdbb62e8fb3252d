# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""LIBTRAIN_HOROVOD=1: `import horovod` and `import horovod.torch as hvd` resolve to libtrain, so a
Horovod script runs with no edit. libtrain-horovod.pth (beside this package in dist-packages) calls
install() at interpreter start when the variable is set; otherwise nothing here is imported. A real
Horovod that any other import finder can load always wins, with one line on stderr saying so."""
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_SHIM = os.path.join(_HERE, "horovod")
_PROVIDED = ("horovod", "horovod.torch")
_VARIABLE = "LIBTRAIN_HOROVOD"


def _setting():
    return os.environ.get(_VARIABLE, "")


class HorovodFinder:
    """First on sys.meta_path: answers for `horovod` only when no other finder can."""

    def __init__(self):
        self.deferred_to = None  # the real Horovod's origin, once one was found

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "horovod":
            return self._top_level(path, target)
        if fullname.startswith("horovod.") and getattr(sys.modules.get("horovod"), "__libtrain__", None):
            if fullname not in _PROVIDED:
                raise ModuleNotFoundError(
                    f"libtrain: {_VARIABLE}=1 provides 'horovod' and 'horovod.torch' (libtrain.torch), "
                    f"not '{fullname}'; see man libtrain, LIBTRAIN_HOROVOD", name=fullname)
        return None  # horovod.torch: found in the stand-in's own __path__

    def _top_level(self, path, target):
        if _setting() != "1":
            raise ImportError(f"libtrain: {_VARIABLE}='{_setting()}' must be 1 (import horovod as libtrain) "
                              "or 0 (off)", name="horovod")
        real = self._elsewhere("horovod", path, target)
        if real is not None:
            if self.deferred_to is None:
                self.deferred_to = real.origin or "a namespace package"
                sys.stderr.write(f"libtrain: {_VARIABLE}=1 ignored: Horovod is installed ({self.deferred_to}) "
                                 f"and 'import horovod' uses it; unset {_VARIABLE} to silence this\n")
            return None
        return importlib.util.spec_from_file_location(
            "horovod", os.path.join(_SHIM, "__init__.py"), submodule_search_locations=[_SHIM])

    def _elsewhere(self, fullname, path, target):
        """What the other finders on sys.meta_path would import as `fullname`, if anything."""
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


def install():
    """Puts the finder first on sys.meta_path (once)."""
    if not any(isinstance(f, HorovodFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, HorovodFinder())
