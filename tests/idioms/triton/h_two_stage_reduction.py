# expect: correct
# problem: level1/5_SumReduction BATCH=16 DIM1=1024 DIM2=256
# why: a Triton kernel sums blocks of rows into partials; torch.sum adds the few partials up
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sum_kernel(X, OUT, N, D, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    p = tl.program_id(1)
    dblk = tl.program_id(2)
    P = tl.num_programs(1)
    cols = dblk * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for r in range(0, ROWS):
        row = p * ROWS + r + tl.zeros([BLOCK_D], dtype=tl.int32)
        acc += tl.load(X + (b * N + row) * D + cols, mask=cmask & (row < N), other=0.0)
    tl.store(OUT + (b * P + p) * D + cols, acc, mask=cmask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        B, N, D = x.shape
        rows = 128
        P = triton.cdiv(N, rows)
        partials = torch.empty(B, P, D, device=x.device, dtype=x.dtype)
        partial_sum_kernel[(B, P, triton.cdiv(D, 128))](x, partials, N, D, ROWS=rows, BLOCK_D=128)
        return partials.sum(dim=1, keepdim=True)
