# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""libtrain's stand-in for the `horovod` package, imported as `horovod` under LIBTRAIN_HOROVOD=1
(see _libtrain_horovod and man libtrain(7), LIBTRAIN_HOROVOD). Only `horovod.torch` is provided:
it is libtrain.torch, Horovod's PyTorch API on libtrain. Nothing here imports torch or libtrain."""

# The Horovod release whose PyTorch API libtrain.torch follows; "+libtrain" marks the stand-in.
__version__ = "0.28.1+libtrain"
__libtrain__ = True


def run(*args, **kwargs):
    """horovod.run() starts its own worker processes (as horovodrun does); libtrain's ranks are
    started by srun instead."""
    raise RuntimeError("libtrain: horovod.run() is not available under LIBTRAIN_HOROVOD=1: start the "
                       "ranks with srun (srun --mpi=pmix -n N python3 SCRIPT) and call the training "
                       "function directly")
