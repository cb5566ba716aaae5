import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def add_scale_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, n: cutlass.Int32, scale: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx  # one element per thread
    if i < n:  # the last block may run past the end
        gC[i] = (gA[i] + gB[i]) * scale


@cute.jit
def add_scale(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, n: cutlass.Int32, scale: cutlass.Float32):
    threads = 256
    add_scale_kernel(mA, mB, mC, n, scale).launch(grid=[(n + threads - 1) // threads, 1, 1], block=[threads, 1, 1])


class ModelNew(nn.Module):
    """Same constructor and forward signature as Model; the work happens in the CuTe kernel."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.compiled = {}  # compiled once per shape (cute.compile specialises on the tensors' layouts), then reused

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        shape = a.shape
        a, b = a.contiguous().view(-1), b.contiguous().view(-1)  # flat: one index per element
        out = torch.empty_like(a)  # every element is written by the kernel
        args = (from_dlpack(a), from_dlpack(b), from_dlpack(out), a.numel(), self.scale)
        if a.shape not in self.compiled:
            self.compiled[a.shape] = cute.compile(add_scale, *args)
        self.compiled[a.shape](*args)
        return out.view(shape)
