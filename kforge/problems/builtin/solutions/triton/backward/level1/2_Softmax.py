# Hand-written solution (kforge's oracle, not an LLM): softmax's forward and backward as Triton kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    # One program per row. Pass 1: online max and sum of exponentials (one read of the row);
    # pass 2 walks the row backwards (its end is the part most likely still in L2) and writes.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full([BLOCK_SIZE], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, x)
        # lanes that have seen only -inf keep s = 0 (avoid exp(-inf - -inf) = nan)
        alpha = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        p = tl.where(m_new == float("-inf"), 0.0, tl.exp(x - m_new))
        s = s * alpha + p
        m = m_new
    row_max = tl.max(m, axis=0)
    scale = tl.where(m == float("-inf"), 0.0, tl.exp(m - row_max))
    inv_sum = 1.0 / tl.sum(s * scale, axis=0)
    n_blocks = tl.cdiv(n_cols, BLOCK_SIZE)
    for i in range(0, n_blocks):
        offs = (n_blocks - 1 - i) * BLOCK_SIZE + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf"))
        tl.store(o_row + offs, tl.exp(x - row_max) * inv_sum, mask=mask)


@triton.jit
def softmax_bwd_kernel(g_ptr, y_ptr, dx_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    # One program per row: dot = sum(g * y) over the row, then dx = y * (g - dot).
    row = tl.program_id(0).to(tl.int64)
    g_row, y_row, d_row = g_ptr + row * n_cols, y_ptr + row * n_cols, dx_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        acc += tl.load(g_row + offs, mask=mask, other=0.0) * tl.load(y_row + offs, mask=mask, other=0.0)
    dot = tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        g = tl.load(g_row + offs, mask=mask, other=0.0)
        y = tl.load(y_row + offs, mask=mask, other=0.0)
        tl.store(d_row + offs, y * (g - dot), mask=mask)


class SoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        block = min(4096, triton.next_power_of_2(n_cols))
        softmax_kernel[(x.numel() // n_cols,)](x, out, n_cols, BLOCK_SIZE=block, num_warps=8)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        g = grad.contiguous()
        dx = torch.empty_like(y)
        n_cols = y.shape[-1]
        block = min(4096, triton.next_power_of_2(n_cols))
        softmax_bwd_kernel[(y.numel() // n_cols,)](g, y, dx, n_cols, BLOCK_SIZE=block, num_warps=8)
        return dx


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return SoftmaxFunction.apply(x)
