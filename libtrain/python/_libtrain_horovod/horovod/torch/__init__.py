# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""`horovod.torch` under LIBTRAIN_HOROVOD=1: every name of libtrain.torch (Horovod's PyTorch API on
libtrain). A name libtrain.torch lacks raises AttributeError in one line saying so."""
import libtrain.torch as _impl
from libtrain.torch import *  # noqa: F401,F403  (its __all__)

__all__ = list(_impl.__all__)


def __getattr__(name):
    try:
        return getattr(_impl, name)
    except AttributeError:
        raise AttributeError(f"libtrain: horovod.torch.{name} is not provided by libtrain.torch "
                             "(LIBTRAIN_HOROVOD=1); see man libtrain, LIBTRAIN_HOROVOD") from None
