import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

# sum over dim 1 of (B, R, C), keepdim: one work-item per (batch, 4 adjacent columns), walking down the R rows,
# so neighbouring work-items read neighbouring memory.
SUM_SRC = """
__kernel void sum_dim1(__global const float* x, __global float* out, const int R, const int C) {
    const int c4 = get_global_id(0), bi = get_global_id(1);
    const __global float* base = x + (long)bi * R * C;
    if (4 * c4 + 3 < C) {
        float4 acc = 0.0f;
        for (int r = 0; r < R; r++) acc += vload4(c4, base + (long)r * C);
        vstore4(acc, c4, out + (long)bi * C);
    } else {
        for (int c = 4 * c4; c < C; c++) {
            float acc = 0.0f;
            for (int r = 0; r < R; r++) acc += base[(long)r * C + c];
            out[(long)bi * C + c] = acc;
        }
    }
}
"""

ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
sum_kernel = cl.Program(ctx, SUM_SRC).build().sum_dim1


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        assert self.dim == 1 and x.dim() == 3
        x = x.contiguous()
        b, r, c = x.shape
        out = torch.empty(b, 1, c, dtype=x.dtype)
        mf = cl.mem_flags
        xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x.numpy())
        ob = cl.Buffer(ctx, mf.WRITE_ONLY, out.numel() * 4)
        sum_kernel(q, ((c + 3) // 4, b), None, xb, ob, np.int32(r), np.int32(c))
        cl.enqueue_copy(q, out.numpy(), ob)
        return out
