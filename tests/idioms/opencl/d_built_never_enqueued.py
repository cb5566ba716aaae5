# expect: kernel_unused
# requires: pyopencl
# rule: kernel_not_run
# static: off
# why: the program is built, the kernel fetched, and forward returns torch's answer without enqueuing it
import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

src = """
__kernel void relu(__global const float* a, __global float* b) {
    int i = get_global_id(0);
    b[i] = max(a[i], 0.0f);
}
"""

ctx = cl.create_some_context(interactive=False)
queue = cl.CommandQueue(ctx)
relu_knl = cl.Program(ctx, src).build().relu


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.use_gpu_path = False  # flipped on once the kernel was "validated"

    def forward(self, x):
        if self.use_gpu_path:
            out = np.empty_like(x.numpy())
            a = cl.Buffer(ctx, cl.mem_flags.COPY_HOST_PTR, hostbuf=x.numpy())
            b = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, out.nbytes)
            relu_knl(queue, out.shape, None, a, b)
            cl.enqueue_copy(queue, out, b)
            return torch.from_numpy(out)
        return torch.clamp(x, min=0)
