# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""torchrun with what it needs on the PyTorch builds libtrain is tested on:

    python3 -m libtrain.torch.run [torchrun's options] script.py [its arguments]

takes torchrun's options (python3 -m torch.distributed.run) and runs it after two fixes, each
applied only where the PyTorch at hand needs it (libtrain.torch._compat.fix_torchrun): Debian
12's PyTorch 1.13 under Python 3.11 (torchrun crashes parsing its own --redirects/--tee
defaults) and PyTorch 2.4+ built without libuv, as Debian's 2.6 and later are (torchrun's
rendezvous store asks for libuv whatever USE_LIBUV says). Elsewhere it is torchrun as it is.
"""
import sys

from . import _compat


def main(argv=None):
    _compat.fix_torchrun()
    from torch.distributed import run
    return run.main(argv)


if __name__ == "__main__":
    sys.exit(main())
