# Hand-written solution (kforge's oracle, not an LLM): LayerNorm's forward and backward as Triton kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ln_fwd_kernel(x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    # One program per row; exact two-pass mean and variance; keeps the row's mean and 1/std for the backward.
    row = tl.program_id(0).to(tl.int64)
    x_row, o_row = x_ptr + row * n_cols, out_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        d = tl.where(mask, tl.load(x_row + offs, mask=mask, other=0.0) - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)  # biased variance, as nn.LayerNorm
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(o_row + offs, (x - mean) * rstd * w + b, mask=mask)


@triton.jit
def ln_bwd_dx_kernel(g_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    # One program per row: dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)).
    row = tl.program_id(0).to(tl.int64)
    g_row, x_row, d_row = g_ptr + row * n_cols, x_ptr + row * n_cols, dx_ptr + row * n_cols
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    cols = tl.arange(0, BLOCK_SIZE)
    a1 = tl.zeros([BLOCK_SIZE], tl.float32)
    a2 = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        gw = tl.load(g_row + offs, mask=mask, other=0.0) * tl.load(w_ptr + offs, mask=mask, other=0.0)
        xh = (tl.load(x_row + offs, mask=mask, other=0.0) - mean) * rstd
        a1 += gw
        a2 += gw * xh
    c1 = tl.sum(a1, axis=0) / n_cols
    c2 = tl.sum(a2, axis=0) / n_cols
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        gw = tl.load(g_row + offs, mask=mask, other=0.0) * tl.load(w_ptr + offs, mask=mask, other=0.0)
        xh = (tl.load(x_row + offs, mask=mask, other=0.0) - mean) * rstd
        tl.store(d_row + offs, rstd * (gw - c1 - xh * c2), mask=mask)


@triton.jit
def ln_bwd_dwdb_kernel(g_ptr, x_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr, n_rows, n_cols,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per BLOCK_N columns, down every row: dw = sum g * xhat, db = sum g (no atomics: deterministic).
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    acc_w = tl.zeros([BLOCK_N], tl.float32)
    acc_b = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_rows, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_mask = rows < n_rows
        offs = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
        mask = row_mask[:, None] & col_mask[None, :]
        g = tl.load(g_ptr + offs, mask=mask, other=0.0)
        mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        xh = (tl.load(x_ptr + offs, mask=mask, other=0.0) - mean[:, None]) * rstd[:, None]
        acc_w += tl.sum(g * xh, axis=0)
        acc_b += tl.sum(g, axis=0)
    tl.store(dw_ptr + cols, acc_w, mask=col_mask)
    tl.store(db_ptr + cols, acc_b, mask=col_mask)


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x = x.contiguous()
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        out = torch.empty_like(x)
        mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        rstd = torch.empty_like(mean)
        block = min(4096, triton.next_power_of_2(n_cols))
        ln_fwd_kernel[(n_rows,)](x, weight.contiguous(), bias.contiguous(), out, mean, rstd, n_cols, eps,
                                 BLOCK_SIZE=block, num_warps=8 if block >= 4096 else 4)
        ctx.save_for_backward(x, weight, mean, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, mean, rstd = ctx.saved_tensors
        g = grad.contiguous()
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        dx = torch.empty_like(x)
        block = min(4096, triton.next_power_of_2(n_cols))
        ln_bwd_dx_kernel[(n_rows,)](g, x, weight.contiguous(), mean, rstd, dx, n_cols, BLOCK_SIZE=block,
                                    num_warps=8 if block >= 4096 else 4)
        dw = torch.empty(n_cols, dtype=torch.float32, device=x.device)
        db = torch.empty_like(dw)
        ln_bwd_dwdb_kernel[(triton.cdiv(n_cols, 64),)](g, x, mean, rstd, dw, db, n_rows, n_cols,
                                                        BLOCK_M=64, BLOCK_N=64, num_warps=4)
        return dx, dw, db, None


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)  # the reference's parameters, by the same names

    def forward(self, x):
        return LayerNormFunction.apply(x, self.norm.weight, self.norm.bias, self.norm.eps)
