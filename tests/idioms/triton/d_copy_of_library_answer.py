# expect: kernel_unused
# problem: level2/1_Gemm_Bias_GELU BATCH=512 IN_FEATURES=1024 OUT_FEATURES=2048
# why: PyTorch computes linear and gelu; the Triton kernel only copies the answer
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(Y, B, n_cols, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(Y + offs, mask=m) + tl.load(B + offs % n_cols, mask=m)
    tl.store(Y + offs, 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476)), mask=m)


@triton.jit
def copy_kernel(A, O, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(O + offs, tl.load(A + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.gelu(self.linear(x)).contiguous()
        out = torch.empty_like(y)
        copy_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
