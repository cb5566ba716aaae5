import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def softmax_kernel(gX: cute.Tensor, gY: cute.Tensor, rows: cutlass.Int32, cols: cutlass.Int32):
    # one warp per row: each lane strides over the row, then the lanes combine with warp shuffles
    lane, warp, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    row = bidx * 4 + warp
    if row < rows:
        m = cutlass.Float32(-cutlass.Float32.inf)
        for c in range(lane, cols, 32):
            v = gX[row, c]
            if v > m:
                m = v
        for off in [16, 8, 4, 2, 1]:
            other = cute.arch.shuffle_sync_bfly(m, offset=off)
            if other > m:
                m = other
        s = cutlass.Float32(0.0)
        for c in range(lane, cols, 32):
            s += cute.math.exp(gX[row, c] - m)
        for off in [16, 8, 4, 2, 1]:
            s += cute.arch.shuffle_sync_bfly(s, offset=off)
        inv = cutlass.Float32(1.0) / s
        for c in range(lane, cols, 32):
            gY[row, c] = cute.math.exp(gX[row, c] - m) * inv


@cute.jit
def softmax(mX: cute.Tensor, mY: cute.Tensor, rows: cutlass.Int32, cols: cutlass.Int32):
    softmax_kernel(mX, mY, rows, cols).launch(grid=[(rows + 3) // 4, 1, 1], block=[32, 4, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.exe = {}  # compiled per shape: cute.compile specialises on the layouts

    def forward(self, x):
        x2 = x.contiguous().view(-1, x.shape[-1])
        y = torch.empty_like(x2)
        args = (from_dlpack(x2), from_dlpack(y), x2.shape[0], x2.shape[1])
        if x2.shape not in self.exe:
            self.exe[x2.shape] = cute.compile(softmax, *args)
        self.exe[x2.shape](*args)
        return y.view(x.shape)
