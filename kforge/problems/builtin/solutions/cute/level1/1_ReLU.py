import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def relu_kernel(gX: cute.Tensor, gY: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    if i < n:
        v = gX[i]
        if v < cutlass.Float32(0.0):
            v = cutlass.Float32(0.0)
        gY[i] = v


@cute.jit
def relu(mX: cute.Tensor, mY: cute.Tensor, n: cutlass.Int32):
    relu_kernel(mX, mY, n).launch(grid=[(n + 255) // 256, 1, 1], block=[256, 1, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._exe = {}  # compiled per shape: cute.compile specialises on the layouts

    def forward(self, x):
        flat = x.contiguous().view(-1)
        y = torch.empty_like(flat)
        args = (from_dlpack(flat), from_dlpack(y), flat.numel())
        if flat.shape not in self._exe:
            self._exe[flat.shape] = cute.compile(relu, *args)
        self._exe[flat.shape](*args)
        return y.view(x.shape)
