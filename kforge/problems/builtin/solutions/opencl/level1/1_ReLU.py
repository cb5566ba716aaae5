import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

SRC = r"""
__kernel void relu(__global const float4* x, __global float4* y, const int n4) {
    int i = get_global_id(0);
    if (i < n4) y[i] = fmax(x[i], (float4)(0.0f));
}
__kernel void relu_tail(__global const float* x, __global float* y, const int start, const int n) {
    int i = start + get_global_id(0);
    if (i < n) y[i] = fmax(x[i], 0.0f);
}
"""

ctx = cl.create_some_context(interactive=False)
queue = cl.CommandQueue(ctx)
prg = cl.Program(ctx, SRC).build()
relu = cl.Kernel(prg, "relu")
relu_tail = cl.Kernel(prg, "relu_tail")
mf = cl.mem_flags


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        x_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x.numpy())
        y_buf = cl.Buffer(ctx, mf.WRITE_ONLY, y.numel() * 4)
        n4 = n // 4
        if n4:
            relu(queue, (n4,), None, x_buf, y_buf, np.int32(n4))
        if n % 4:
            relu_tail(queue, (n % 4,), None, x_buf, y_buf, np.int32(4 * n4), np.int32(n))
        cl.enqueue_copy(queue, y.numpy(), y_buf)
        return y
