# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""Gradient compression for libtrain.torch, as horovod.torch.Compression: `none` passes tensors
through; `fp16` sends floating-point tensors as float16 (half the bytes on the wire) and restores
their dtype afterwards. Reduction of float16 happens in float32 inside libtrain."""
import torch


class Compressor:
    """compress(tensor) -> (tensor to send, context); decompress(tensor, context) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    @staticmethod
    def compress(tensor):
        if tensor.is_floating_point() and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx) if ctx is not None else tensor


class Compression:
    """Compression.none and Compression.fp16, as Horovod names them."""
    none = NoneCompressor
    fp16 = FP16Compressor
