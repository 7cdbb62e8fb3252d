# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
"""SyncBatchNorm of libtrain.torch: batch normalization whose training-time statistics (mean and
variance per channel) are those of the global batch, all ranks' samples together, as Horovod's
hvd.SyncBatchNorm. It is a drop-in for torch.nn.BatchNorm{1,2,3}d, so torchvision models take it
as `norm_layer=hvd.SyncBatchNorm`. In eval mode, or on one rank, it is plain batch norm.

Forward reduces [sum(x), sum(x^2), count] per channel in one allreduce; backward reduces
[sum(dy), sum(dy * (x - mean))] in another, so the gradient is that of the global batch too.
"""
import torch
import torch.nn.functional as F

from . import _ops


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"libtrain.torch: SyncBatchNorm expects at least 2D input (got {input.dim()}D)")

    def _momentum(self):
        if self.momentum is not None:
            return self.momentum
        return 1.0 / float(self.num_batches_tracked)  # cumulative moving average

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or _ops._world().size == 1:
            return super().forward(input)
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, self.running_mean, self.running_var,
                                      self.eps, self._momentum() if self.track_running_stats else 0.0)


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        xf = x.float()
        local_count = x.numel() // channels
        stats = torch.cat([xf.sum(dims), (xf * xf).sum(dims),
                           torch.tensor([float(local_count)], device=x.device)])
        _ops.allreduce_(stats, op=_ops.Sum, name="sync_batch_norm.stats")
        count = stats[-1]
        mean = stats[:channels] / count
        var = (stats[channels:2 * channels] / count - mean * mean).clamp_(min=0)
        if running_mean is not None and momentum:
            with torch.no_grad():
                unbiased = var * (count / (count - 1).clamp(min=1))
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        invstd = torch.rsqrt(var + eps)
        shape = [1, channels] + [1] * (x.dim() - 2)
        xhat = (xf - mean.view(shape)) * invstd.view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.count = count
        ctx.shape = shape
        out = xhat
        if weight is not None:
            out = out * weight.float().view(shape) + bias.float().view(shape)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        xhat, invstd, weight = ctx.saved_tensors
        shape, channels = ctx.shape, xhat.shape[1]
        dims = [0] + list(range(2, xhat.dim()))
        dy = grad_out.float()
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        grad_weight = sum_dy_xhat.to(weight.dtype) if weight is not None else None
        grad_bias = sum_dy.to(weight.dtype) if weight is not None else None
        totals = torch.cat([sum_dy, sum_dy_xhat])
        _ops.allreduce_(totals, op=_ops.Sum, name="sync_batch_norm.grads")
        mean_dy = (totals[:channels] / ctx.count).view(shape)
        mean_dy_xhat = (totals[channels:] / ctx.count).view(shape)
        scale = invstd.view(shape)
        if weight is not None:
            scale = scale * weight.float().view(shape)
        grad_x = (dy - mean_dy - xhat * mean_dy_xhat) * scale
        return grad_x.to(grad_out.dtype), grad_weight, grad_bias, None, None, None, None
