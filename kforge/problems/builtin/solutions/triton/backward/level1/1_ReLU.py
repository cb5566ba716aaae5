# Hand-written solution (kforge's oracle, not an LLM): ReLU's forward and backward as Triton kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_fwd_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)


@triton.jit
def relu_bwd_kernel(g_ptr, y_ptr, dx_ptr, n, BLOCK_SIZE: tl.constexpr):
    # the gradient passes where the output is positive (exactly where the input was), as torch.relu's
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(dx_ptr + offs, tl.where(y > 0, g, 0.0), mask=mask)


BLOCK = 4096


class ReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_fwd_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK_SIZE=BLOCK, num_warps=8)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        g = grad.contiguous()
        dx = torch.empty_like(y)
        n = y.numel()
        relu_bwd_kernel[(triton.cdiv(n, BLOCK),)](g, y, dx, n, BLOCK_SIZE=BLOCK, num_warps=8)
        return dx


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ReLUFunction.apply(x)
