import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

OPENCL_C = r"""
// out = x * rsqrt(mean(x^2) + eps) * weight * silu(g), one row per work-item
__kernel void rmsnorm_silu_gate(__global const float4* x, __global const float4* g, __global const float4* weight,
                                __global float4* out, const int d4, const float eps) {
    const long row = (long)get_global_id(0) * d4;
    float4 ss = 0.0f;
    for (int i = 0; i < d4; i++) { float4 v = x[row + i]; ss = fma(v, v, ss); }
    const float rms = rsqrt(((ss.x + ss.y) + (ss.z + ss.w)) / (4 * d4) + eps);
    for (int i = 0; i < d4; i++) {
        float4 gv = g[row + i];
        out[row + i] = x[row + i] * rms * weight[i] * (gv / (1.0f + exp(-gv)));
    }
}
"""

_CTX = cl.create_some_context(interactive=False)
_Q = cl.CommandQueue(_CTX)
_KERNEL = cl.Kernel(cl.Program(_CTX, OPENCL_C).build(), "rmsnorm_silu_gate")


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x, g):
        x, g = x.contiguous(), g.contiguous()
        d = x.shape[-1]
        assert d % 4 == 0
        out = torch.empty_like(x)
        mf = cl.mem_flags
        bufs = [cl.Buffer(_CTX, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=t.detach().numpy()) for t in (x, g, self.weight)]
        out_buf = cl.Buffer(_CTX, mf.WRITE_ONLY, out.numel() * 4)
        _KERNEL(_Q, (x.numel() // d,), (1,), *bufs, out_buf, np.int32(d // 4), np.float32(self.eps))
        cl.enqueue_copy(_Q, out.numpy(), out_buf)
        return out
