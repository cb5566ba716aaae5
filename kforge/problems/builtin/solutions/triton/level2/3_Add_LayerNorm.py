import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def widened_sum(x_row, y_row, offs, mask):
    # x + y widened to fp32 (any float storage; the output store rounds once)
    return tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32) + \
        tl.load(y_row + offs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def add_layernorm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps,
                         BLOCK_SIZE: tl.constexpr, ONE_BLOCK: tl.constexpr):
    # One program per row: z = x + y, then LayerNorm(z) with exact two-pass mean/variance.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    if ONE_BLOCK:  # the row fits in registers: x and y are read once
        mask = cols < n_cols
        z = widened_sum(x_row, y_row, cols, mask)
        mean = tl.sum(z, axis=0) / n_cols
        d = tl.where(mask, z - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
        tl.store(o_row + cols, d * rstd * w + b, mask=mask)
    else:
        acc = tl.zeros([BLOCK_SIZE], tl.float32)
        for start in range(0, n_cols, BLOCK_SIZE):
            offs = start + cols
            mask = offs < n_cols
            acc += widened_sum(x_row, y_row, offs, mask)
        mean = tl.sum(acc, axis=0) / n_cols
        acc = tl.zeros([BLOCK_SIZE], tl.float32)
        for start in range(0, n_cols, BLOCK_SIZE):
            offs = start + cols
            mask = offs < n_cols
            z = widened_sum(x_row, y_row, offs, mask)
            d = tl.where(mask, z - mean, 0.0)
            acc += d * d
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_SIZE):
            offs = start + cols
            mask = offs < n_cols
            z = widened_sum(x_row, y_row, offs, mask)
            w = tl.load(w_ptr + offs, mask=mask).to(tl.float32)
            b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
            tl.store(o_row + offs, (z - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, y):
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        BLOCK_SIZE = min(16384, triton.next_power_of_2(n_cols))
        add_layernorm_kernel[(n_rows,)](x, y, self.norm.weight.contiguous(), self.norm.bias.contiguous(), out,
                                        n_cols, self.norm.eps, BLOCK_SIZE=BLOCK_SIZE,
                                        ONE_BLOCK=BLOCK_SIZE >= n_cols, num_warps=8 if BLOCK_SIZE >= 4096 else 4)
        return out
