import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_scale_fwd_kernel(a_ptr, b_ptr, w_ptr, out_ptr, n, cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n  # the last block may run past the end
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    w = tl.load(w_ptr + offsets % cols, mask=mask)
    tl.store(out_ptr + offsets, (a + b) * w, mask=mask)


@triton.jit
def add_scale_bwd_kernel(g_ptr, a_ptr, b_ptr, w_ptr, dab_ptr, dw_ptr, rows, cols,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per BLOCK_N columns: it walks down all rows, writing d(a) = d(b) = g * w and summing
    # g * (a + b) over the rows for d(w) (a reduction over the batch, done in one pass, no atomics).
    pid = tl.program_id(axis=0)
    cols_idx = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols_idx < cols
    w = tl.load(w_ptr + cols_idx, mask=col_mask, other=0.0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, rows, BLOCK_M):
        rows_idx = start + tl.arange(0, BLOCK_M)
        offs = rows_idx[:, None] * cols + cols_idx[None, :]
        mask = (rows_idx[:, None] < rows) & col_mask[None, :]
        g = tl.load(g_ptr + offs, mask=mask, other=0.0)
        s = tl.load(a_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs, mask=mask, other=0.0)
        tl.store(dab_ptr + offs, g * w[None, :], mask=mask)
        acc += tl.sum(g * s, axis=0)
    tl.store(dw_ptr + cols_idx, acc, mask=col_mask)


class AddScale(torch.autograd.Function):
    """Autograd calls forward, then backward with the gradient of the output; both launch our kernels."""

    @staticmethod
    def forward(ctx, a, b, weight):
        a, b, weight = a.contiguous(), b.contiguous(), weight.contiguous()
        out = torch.empty_like(a)  # every element is written by the kernel
        n = a.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
        add_scale_fwd_kernel[grid](a, b, weight, out, n, weight.numel(), BLOCK_SIZE=1024)
        ctx.save_for_backward(a, b, weight)  # what the backward needs
        return out

    @staticmethod
    def backward(ctx, grad_out):
        a, b, weight = ctx.saved_tensors
        g = grad_out.contiguous()
        cols = weight.numel()
        rows = g.numel() // cols
        d_ab = torch.empty_like(g)
        d_weight = torch.empty_like(weight)
        grid = lambda meta: (triton.cdiv(cols, meta["BLOCK_N"]),)
        add_scale_bwd_kernel[grid](g, a, b, weight, d_ab, d_weight, rows, cols, BLOCK_M=32, BLOCK_N=64)
        return d_ab, d_ab, d_weight  # one gradient per argument of forward, in order


class ModelNew(nn.Module):
    """Same constructor, forward signature and parameters (same names) as Model; the work happens in the kernels."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return AddScale.apply(a, b, self.weight)
