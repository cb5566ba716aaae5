# expect: not_correct
# why: PyTorch computes relu; a Triton kernel multiplies it by one in place
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(Y, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, tl.load(Y + offs, mask=m) * s, mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        n = y.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](y, 1.0, n, BLOCK=1024)
        return y
