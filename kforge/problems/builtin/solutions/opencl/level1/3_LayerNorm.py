import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

CL_SRC = r"""
// y = (x - mean) / sqrt(var + eps) * w + b over each row; one work-item per row (two passes: the mean, then
// the variance around it, which keeps the fp32 sums accurate), float4 at a time.
__kernel void layer_norm(__global const float* x, __global const float* w, __global const float* b,
                         __global float* y, const int cols, const float eps) {
    const int r = get_global_id(0);
    const __global float* xr = x + (long)r * cols;
    __global float* yr = y + (long)r * cols;
    const int n4 = cols / 4;
    float4 s4 = 0.0f;
    for (int i = 0; i < n4; i++) s4 += vload4(i, xr);
    float s = (s4.x + s4.y) + (s4.z + s4.w);
    for (int i = 4 * n4; i < cols; i++) s += xr[i];
    const float mean = s / cols;
    float4 v4 = 0.0f;
    for (int i = 0; i < n4; i++) { float4 d = vload4(i, xr) - mean; v4 = fma(d, d, v4); }
    float v = (v4.x + v4.y) + (v4.z + v4.w);
    for (int i = 4 * n4; i < cols; i++) { float d = xr[i] - mean; v = fma(d, d, v); }
    const float rstd = rsqrt(v / cols + eps);
    for (int i = 0; i < n4; i++)
        vstore4((vload4(i, xr) - mean) * rstd * vload4(i, w) + vload4(i, b), i, yr);
    for (int i = 4 * n4; i < cols; i++) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}
"""


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)  # holds the parameters; forward never calls it
        self.cl_ctx = cl.create_some_context(interactive=False)
        self.cl_queue = cl.CommandQueue(self.cl_ctx)
        self.cl_layer_norm = cl.Kernel(cl.Program(self.cl_ctx, CL_SRC).build(), "layer_norm")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        d = x.shape[-1]
        rows = x.numel() // d
        y = torch.empty_like(x)
        ctx, mf = self.cl_ctx, cl.mem_flags
        ro = mf.READ_ONLY | mf.COPY_HOST_PTR
        x_buf = cl.Buffer(ctx, ro, hostbuf=x.numpy())
        w_buf = cl.Buffer(ctx, ro, hostbuf=self.norm.weight.detach().contiguous().numpy())
        b_buf = cl.Buffer(ctx, ro, hostbuf=self.norm.bias.detach().contiguous().numpy())
        y_buf = cl.Buffer(ctx, mf.WRITE_ONLY, y.numel() * 4)
        self.cl_layer_norm(self.cl_queue, (rows,), (1,), x_buf, w_buf, b_buf, y_buf, np.int32(d),
                           np.float32(self.norm.eps))
        cl.enqueue_copy(self.cl_queue, y.numpy(), y_buf)
        return y
