# Hand-written solution (kforge's oracle, not an LLM): the gated RMSNorm's forward and backward as Triton kernels
# behind a torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gate_fwd_kernel(x_ptr, g_ptr, w_ptr, out_ptr, r_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    # One program per row: out = x * r * w * silu(g), r = rsqrt(mean(x^2) + eps), kept for the backward.
    row = tl.program_id(0).to(tl.int64)
    x_row, g_row, o_row = x_ptr + row * n_cols, g_ptr + row * n_cols, out_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0)
        acc += x * x
    r = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    tl.store(r_ptr + row, r)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0)
        g = tl.load(g_row + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask)
        tl.store(o_row + offs, x * r * w * (g / (1.0 + tl.exp(-g))), mask=mask)


@triton.jit
def gate_bwd_rows_kernel(dy_ptr, x_ptr, g_ptr, w_ptr, r_ptr, dx_ptr, dg_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    # One program per row. With u = dy * w * silu(g): dx = r * u - r^3 * x * mean(u * x);
    # dg = dy * x * r * w * silu'(g), silu'(g) = s * (1 + g * (1 - s)), s = sigmoid(g).
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    r = tl.load(r_ptr + row)
    cols = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        dy = tl.load(dy_ptr + base + offs, mask=mask, other=0.0)
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
        g = tl.load(g_ptr + base + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0)
        s = 1.0 / (1.0 + tl.exp(-g))
        acc += dy * w * g * s * x
    k = r * r * r * tl.sum(acc, axis=0) / n_cols
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        dy = tl.load(dy_ptr + base + offs, mask=mask, other=0.0)
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
        g = tl.load(g_ptr + base + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0)
        s = 1.0 / (1.0 + tl.exp(-g))
        tl.store(dx_ptr + base + offs, r * dy * w * g * s - k * x, mask=mask)
        tl.store(dg_ptr + base + offs, dy * x * r * w * s * (1.0 + g * (1.0 - s)), mask=mask)


@triton.jit
def gate_bwd_dw_kernel(dy_ptr, x_ptr, g_ptr, r_ptr, dw_ptr, n_rows, n_cols,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per BLOCK_N columns, down every row: dw = sum over rows of dy * x * r * silu(g).
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_rows, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_mask = rows < n_rows
        offs = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
        mask = row_mask[:, None] & col_mask[None, :]
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        g = tl.load(g_ptr + offs, mask=mask, other=0.0)
        r = tl.load(r_ptr + rows, mask=row_mask, other=0.0)
        acc += tl.sum(dy * x * r[:, None] * (g / (1.0 + tl.exp(-g))), axis=0)
    tl.store(dw_ptr + cols, acc, mask=col_mask)


class GatedRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g, weight, eps):
        x, g = x.contiguous(), g.contiguous()
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        out = torch.empty_like(x)
        r = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        block = min(4096, triton.next_power_of_2(n_cols))
        gate_fwd_kernel[(n_rows,)](x, g, weight.contiguous(), out, r, n_cols, eps, BLOCK_SIZE=block,
                                   num_warps=8 if block >= 4096 else 4)
        ctx.save_for_backward(x, g, weight, r)
        return out

    @staticmethod
    def backward(ctx, dy):
        x, g, weight, r = ctx.saved_tensors
        dy = dy.contiguous()
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        dx, dg = torch.empty_like(x), torch.empty_like(g)
        block = min(4096, triton.next_power_of_2(n_cols))
        gate_bwd_rows_kernel[(n_rows,)](dy, x, g, weight.contiguous(), r, dx, dg, n_cols, BLOCK_SIZE=block,
                                        num_warps=8 if block >= 4096 else 4)
        dw = torch.empty(n_cols, dtype=torch.float32, device=x.device)
        gate_bwd_dw_kernel[(triton.cdiv(n_cols, 64),)](dy, x, g, r, dw, n_rows, n_cols, BLOCK_M=64, BLOCK_N=64,
                                                        num_warps=4)
        return dx, dg, dw, None


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))  # the reference's parameter, by the same name

    def forward(self, x, g):
        return GatedRMSNormFunction.apply(x, g, self.weight, self.eps)
