import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def colsum_kernel(gX: cute.Tensor, gY: cute.Tensor, B: cutlass.Int32, R: cutlass.Int32, C: cutlass.Int32):
    # gX is (B * R, C), gY is (B, C): one thread per (batch, column) walks down the R rows
    tidx, _, _ = cute.arch.thread_idx()
    bidx, b, _ = cute.arch.block_idx()
    col = bidx * 256 + tidx
    if col < C:
        acc = cutlass.Float32(0.0)
        for r in range(R):
            acc += gX[b * R + r, col]
        gY[b, col] = acc


@cute.jit
def colsum(mX: cute.Tensor, mY: cute.Tensor, B: cutlass.Int32, R: cutlass.Int32, C: cutlass.Int32):
    colsum_kernel(mX, mY, B, R, C).launch(grid=[(C + 255) // 256, B, 1], block=[256, 1, 1])


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.exe = {}  # compiled per shape: cute.compile specialises on the layouts

    def forward(self, x):
        b, r, c = x.shape
        x2 = x.contiguous().view(b * r, c)
        y = torch.empty(b, c, device=x.device, dtype=x.dtype)
        args = (from_dlpack(x2), from_dlpack(y), b, r, c)
        if x.shape not in self.exe:
            self.exe[x.shape] = cute.compile(colsum, *args)
        self.exe[x.shape](*args)
        return y.view(b, 1, c)
