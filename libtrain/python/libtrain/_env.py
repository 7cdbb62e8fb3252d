# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""libtrain's environment settings read from Python, parsed and worded as the C++ side does
(libtrain/src/env.h): unset or empty means the default; a number is plain decimal digits within
the variable's bounds; anything else raises InvalidArgument (a ValueError) in one line naming the
variable and the value."""
import os
import re

from ._libtrain import InvalidArgument

_MAX_SHOWN = 64


def _shown(value):
    """The value as the message shows it: one line whatever it holds, and not unboundedly long."""
    text = "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or c in "\x7f\\" else c for c in value[:_MAX_SHOWN])
    return text + ("..." if len(value) > _MAX_SHOWN else "")


def parse_whole(name, value, minimum, maximum, unit=""):
    """`value` of variable `name` as a whole number in [minimum, maximum]."""
    if re.fullmatch(r"[0-9]+", value, flags=re.ASCII) is None or not minimum <= int(value) <= maximum:
        of = f"of {unit} " if unit else ""
        raise InvalidArgument(f"libtrain: {name}='{_shown(value)}' must be a whole number {of}"
                              f"from {minimum} to {maximum}")
    return int(value)


def env_whole(name, default, minimum, maximum, unit=""):
    """The variable as parse_whole() reads it; `default` when it is unset or empty."""
    value = os.environ.get(name, "")
    return parse_whole(name, value, minimum, maximum, unit) if value else default
