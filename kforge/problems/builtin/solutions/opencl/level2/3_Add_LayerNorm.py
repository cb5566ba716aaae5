import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

# LayerNorm(x + y): the sum is written into the output row first, then normalised there (one work-item per row).
SRC = """
__kernel void add_layer_norm(__global const float* x, __global const float* y, __global const float* w,
                             __global const float* b, __global float* out, const int D, const float eps) {
    const long off = (long)get_global_id(0) * D;
    __global float* o = out + off;
    float s = 0.0f;
    for (int i = 0; i < D; i += 4) {
        float4 v = vload4(0, x + off + i) + vload4(0, y + off + i);
        vstore4(v, 0, o + i);
        s += (v.x + v.y) + (v.z + v.w);
    }
    const float mean = s / D;
    float var = 0.0f;
    for (int i = 0; i < D; i += 4) {
        float4 d = vload4(0, o + i) - mean;
        var += dot(d, d);
    }
    const float rstd = rsqrt(var / D + eps);
    for (int i = 0; i < D; i += 4)
        vstore4((vload4(0, o + i) - mean) * rstd * vload4(0, w + i) + vload4(0, b + i), 0, o + i);
}
"""


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        assert dim % 4 == 0
        self.norm = nn.LayerNorm(dim)
        self.ctx = cl.create_some_context(interactive=False)
        self.queue = cl.CommandQueue(self.ctx)
        self.kernel = cl.Kernel(cl.Program(self.ctx, SRC).build(), "add_layer_norm")

    def _buf(self, t):
        return cl.Buffer(self.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=t.detach().contiguous().numpy())

    def forward(self, x, y):
        d = x.shape[-1]
        rows = x.numel() // d
        out = torch.empty(x.shape)
        out_buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, out.numel() * 4)
        self.kernel(self.queue, (rows,), (1,), self._buf(x), self._buf(y), self._buf(self.norm.weight),
                    self._buf(self.norm.bias), out_buf, np.int32(d), np.float32(self.norm.eps))
        cl.enqueue_copy(self.queue, out.numpy(), out_buf)
        return out
