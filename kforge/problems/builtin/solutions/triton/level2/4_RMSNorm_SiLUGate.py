import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_silu_gate_kernel(x_ptr, g_ptr, w_ptr, out_ptr, n_cols, eps,
                             BLOCK_SIZE: tl.constexpr, ONE_BLOCK: tl.constexpr):
    # One program per row: x * rsqrt(mean(x^2) + eps) * weight * silu(g).
    # Any float storage: loads are widened to fp32, the store rounds once to the output's dtype.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    g_row = g_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    if ONE_BLOCK:  # the row fits in registers: x is read once
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        g = tl.load(g_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
        tl.store(o_row + cols, x * rstd * w * (g / (1.0 + tl.exp(-g))), mask=mask)
    else:
        acc = tl.zeros([BLOCK_SIZE], tl.float32)
        for start in range(0, n_cols, BLOCK_SIZE):
            offs = start + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_SIZE):
            offs = start + cols
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            g = tl.load(g_row + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask).to(tl.float32)
            tl.store(o_row + offs, x * rstd * w * (g / (1.0 + tl.exp(-g))), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x, g):
        x = x.contiguous()
        g = g.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        BLOCK_SIZE = min(16384, triton.next_power_of_2(n_cols))
        rmsnorm_silu_gate_kernel[(n_rows,)](x, g, self.weight.contiguous(), out, n_cols, self.eps,
                                            BLOCK_SIZE=BLOCK_SIZE, ONE_BLOCK=BLOCK_SIZE >= n_cols,
                                            num_warps=8 if BLOCK_SIZE >= 4096 else 4)
        return out
