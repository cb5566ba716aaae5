import tilelang
import tilelang.language as T
import torch
import torch.nn as nn


@tilelang.jit(out_idx=[-1])  # the last tensor is the output: the kernel allocates and returns it
def add_scale(M, N, scale, block_M=32, block_N=128):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        # one thread block per (block_M x block_N) tile; T.Parallel spreads the tile over its 128 threads
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                row, col = by * block_M + i, bx * block_N + j
                if row < M and col < N:  # the last tiles may run past the end
                    C[row, col] = (A[row, col] + B[row, col]) * scale

    return main


class ModelNew(nn.Module):
    """Same constructor and forward signature as Model; the work happens in the TileLang kernel."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.kernels = {}  # compiled once per shape

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        m, n = a.shape
        if (m, n) not in self.kernels:
            self.kernels[(m, n)] = add_scale(m, n, self.scale)
        return self.kernels[(m, n)](a, b)
