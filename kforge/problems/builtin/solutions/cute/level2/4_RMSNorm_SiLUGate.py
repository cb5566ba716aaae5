import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def rmsnorm_gate_kernel(gX: cute.Tensor, gG: cute.Tensor, gW: cute.Tensor, gY: cute.Tensor, rows: cutlass.Int32,
                        D: cutlass.Int32, eps: cutlass.Float32):
    # one warp per row: the sum of squares over lanes and warp shuffles, then the gated, weighted output
    lane, warp, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    row = bidx * 4 + warp
    if row < rows:
        ss = cutlass.Float32(0.0)
        for c in range(lane, D, 32):
            v = gX[row, c]
            ss += v * v
        for off in [16, 8, 4, 2, 1]:
            ss += cute.arch.shuffle_sync_bfly(ss, offset=off)
        scale = cute.math.rsqrt(ss / D + eps)
        for c in range(lane, D, 32):
            g = gG[row, c]
            gY[row, c] = gX[row, c] * scale * gW[c] * (g / (cutlass.Float32(1.0) + cute.math.exp(-g)))


@cute.jit
def rmsnorm_gate(mX: cute.Tensor, mG: cute.Tensor, mW: cute.Tensor, mY: cute.Tensor, rows: cutlass.Int32,
                 D: cutlass.Int32, eps: cutlass.Float32):
    rmsnorm_gate_kernel(mX, mG, mW, mY, rows, D, eps).launch(grid=[(rows + 3) // 4, 1, 1], block=[32, 4, 1])


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.exe = {}  # compiled per shape: cute.compile specialises on the layouts

    def forward(self, x, g):
        d = x.shape[-1]
        x2, g2 = x.contiguous().view(-1, d), g.contiguous().view(-1, d)
        y = torch.empty_like(x2)
        args = (from_dlpack(x2), from_dlpack(g2), from_dlpack(self.weight.detach()), from_dlpack(y), x2.shape[0], d,
                self.eps)
        if x2.shape not in self.exe:
            self.exe[x2.shape] = cute.compile(rmsnorm_gate, *args)
        self.exe[x2.shape](*args)
        return y.view(x.shape)
