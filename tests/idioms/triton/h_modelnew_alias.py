# expect: correct
# why: a Triton kernel behind a class named TritonReLU, bound to ModelNew at the end
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_fwd(X, Y, N, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m, other=0.0)
    tl.store(Y + offs, tl.maximum(x, 0.0), mask=m)


class TritonReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.BLOCK = 1024

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _relu_fwd[(triton.cdiv(n, self.BLOCK),)](x, y, n, BLOCK=self.BLOCK)
        return y


ModelNew = TritonReLU
