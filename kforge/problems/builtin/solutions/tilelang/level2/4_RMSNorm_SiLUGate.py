import tilelang
import tilelang.language as T
import torch
import torch.nn as nn


@tilelang.jit(out_idx=[-1])
def rmsnorm_silu_gate(rows, D, eps, threads=256):
    # one row per thread block: the row's squares summed across the block's threads (T.reduce_sum), then
    # x * rsqrt(mean + eps) * w * silu(g) written back
    f32 = "float32"

    @T.prim_func
    def main(X: T.Tensor((rows, D), f32), G: T.Tensor((rows, D), f32), Wt: T.Tensor((D,), f32),
             Y: T.Tensor((rows, D), f32)):
        with T.Kernel(rows, threads=threads) as r:
            x = T.alloc_fragment((1, D), f32)
            sq = T.alloc_fragment((1, D), f32)
            ss = T.alloc_fragment((1,), f32)
            T.copy(X[r:r + 1, 0:D], x)
            for i, j in T.Parallel(1, D):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, ss, dim=1)
            for i, j in T.Parallel(1, D):
                g = G[r, j]
                Y[r, j] = x[i, j] * T.rsqrt(ss[i] / D + eps) * Wt[j] * (g / (1.0 + T.exp(-g)))

    return main


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self._k = {}

    def forward(self, x, g):
        d = x.shape[-1]
        x2, g2 = x.contiguous().view(-1, d), g.contiguous().view(-1, d)
        key = (x2.shape[0], d)
        if key not in self._k:
            self._k[key] = rmsnorm_silu_gate(x2.shape[0], d, self.eps)
        return self._k[key](x2, g2, self.weight).view(x.shape)
