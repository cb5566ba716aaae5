import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

KERNELS = """
// One work-item per row, three passes over it in float4s: the maximum, the sum of exponentials, the output.
__kernel void softmax_rows(__global const float* x, __global float* y, const int cols) {
    const int row = get_global_id(0);
    const __global float* xr = x + (long)row * cols;
    __global float* yr = y + (long)row * cols;
    const int n4 = cols / 4;
    float4 m4 = (float4)(-INFINITY);
    for (int i = 0; i < n4; i++) m4 = fmax(m4, vload4(i, xr));
    float m = fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w));
    for (int i = 4 * n4; i < cols; i++) m = fmax(m, xr[i]);
    float4 s4 = (float4)(0.0f);
    for (int i = 0; i < n4; i++) s4 += exp(vload4(i, xr) - m);
    float s = (s4.x + s4.y) + (s4.z + s4.w);
    for (int i = 4 * n4; i < cols; i++) s += exp(xr[i] - m);
    const float inv = 1.0f / s;
    for (int i = 0; i < n4; i++) vstore4(exp(vload4(i, xr) - m) * inv, i, yr);
    for (int i = 4 * n4; i < cols; i++) yr[i] = exp(xr[i] - m) * inv;
}
"""

_ctx = cl.create_some_context(interactive=False)
_queue = cl.CommandQueue(_ctx)
_softmax = cl.Program(_ctx, KERNELS).build().softmax_rows


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        out = torch.empty_like(x)
        mf = cl.mem_flags
        src = cl.Buffer(_ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x.numpy())
        dst = cl.Buffer(_ctx, mf.WRITE_ONLY, out.numel() * out.element_size())
        # work-groups of one row each, so the rows spread over every core
        _softmax(_queue, (rows,), (1,), src, dst, np.int32(cols))
        cl.enqueue_copy(_queue, out.numpy(), dst)
        return out
