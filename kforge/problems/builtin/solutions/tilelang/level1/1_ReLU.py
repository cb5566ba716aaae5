import tilelang
import tilelang.language as T
import torch
import torch.nn as nn


@tilelang.jit(out_idx=[-1])
def relu_kernel(M, N, block_M=16, block_N=1024, threads=256):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                r, c = by * block_M + i, bx * block_N + j
                if r < M and c < N:
                    Y[r, c] = T.max(X[r, c], T.float32(0))

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._kernels = {}

    def forward(self, x):
        x2 = x.contiguous().view(x.shape[0], -1)
        key = tuple(x2.shape)
        if key not in self._kernels:
            self._kernels[key] = relu_kernel(*key)
        return self._kernels[key](x2).view(x.shape)
