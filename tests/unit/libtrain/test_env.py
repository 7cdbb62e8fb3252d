# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""libtrain's environment parser on the Python side (libtrain/_env.py) and its one user,
LIBTRAIN_TORCH_BUCKET_BYTES: malformed, negative, out-of-range and overflowing values raise
libtrain.InvalidArgument (a ValueError) worded as the C++ side words them (tests/unit/libtrain/
test_env.cc); unset and empty mean the default."""
import os
import sys

import libtrain
from libtrain import _env

MALFORMED = ["abc", "-1", "12x", "99999999999999999999999", " 5", "+5", "0x10", "1.5", "5 ", "1e3", "",
             "\u0661", "1\n2"]


def rejection(fn):
    try:
        fn()
    except libtrain.InvalidArgument as e:
        assert isinstance(e, ValueError)
        return str(e)
    return ""


def expect_rejected(name, value, message):
    assert message, f"{name}={value!r} accepted"
    assert message.startswith(f"libtrain: {name}='"), message
    assert "\n" not in message, message


def test_parser():
    assert _env.parse_whole("X", "007", 0, 10) == 7
    for bad in MALFORMED:
        expect_rejected("LIBTRAIN_X", bad, rejection(lambda: _env.parse_whole("LIBTRAIN_X", bad, 0, 1 << 40, "bytes")))
    expect_rejected("X", "11", rejection(lambda: _env.parse_whole("X", "11", 0, 10)))
    # The same words as src/env.cc.
    assert rejection(lambda: _env.parse_whole("LIBTRAIN_SHM_CHUNK", "12x", 4096, 1 << 30, "bytes")) == \
        "libtrain: LIBTRAIN_SHM_CHUNK='12x' must be a whole number of bytes from 4096 to 1073741824"
    assert rejection(lambda: _env.parse_whole("RANK", "-1", 0, 9)) == \
        "libtrain: RANK='-1' must be a whole number from 0 to 9"
    os.environ.pop("LIBTRAIN_TEST_VALUE", None)
    assert _env.env_whole("LIBTRAIN_TEST_VALUE", 42, 0, 10) == 42
    os.environ["LIBTRAIN_TEST_VALUE"] = ""
    assert _env.env_whole("LIBTRAIN_TEST_VALUE", 42, 0, 10) == 42


def test_bucket_bytes():
    try:
        from libtrain.torch import _optimizer
    except ImportError as e:  # no torch here: the parser alone was tested
        print(f"skipping LIBTRAIN_TORCH_BUCKET_BYTES: {e}")
        return
    name = "LIBTRAIN_TORCH_BUCKET_BYTES"
    os.environ.pop(name, None)
    assert _optimizer._bucket_bytes() == 4 << 20
    os.environ[name] = "2048"
    assert _optimizer._bucket_bytes() == 2048
    for bad in [b for b in MALFORMED if b] + ["0"]:
        os.environ[name] = bad
        expect_rejected(name, bad, rejection(_optimizer._bucket_bytes))
    os.environ[name] = "-1"
    assert rejection(_optimizer._bucket_bytes) == \
        f"libtrain: {name}='-1' must be a whole number of bytes from 1 to {1 << 40}"
    os.environ.pop(name)


if __name__ == "__main__":
    test_parser()
    test_bucket_bytes()
    print("2 passed, 0 failed")
    sys.exit(0)
