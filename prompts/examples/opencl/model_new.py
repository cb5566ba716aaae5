import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

# OpenCL C: one work-item per element. Work-items form work-groups (a Metal threadgroup, a CUDA block);
# __local memory is shared within a work-group.
SOURCE = r"""
__kernel void add_scale(__global const float* a, __global const float* b, __global float* out,
                        const int n, const float scale) {
    int i = get_global_id(0);
    if (i < n) {  // the global size is rounded up to a multiple of the work-group size
        out[i] = (a[i] + b[i]) * scale;
    }
}
"""

CTX = cl.create_some_context(interactive=False)
QUEUE = cl.CommandQueue(CTX)
PROGRAM = cl.Program(CTX, SOURCE).build()  # built once, when the module is imported
ADD_SCALE = cl.Kernel(PROGRAM, "add_scale")
MF = cl.mem_flags


class ModelNew(nn.Module):
    """Same constructor and forward signature as Model; the work happens in the OpenCL kernel."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a_np = a.contiguous().numpy()  # torch CPU tensors; .numpy() shares their memory
        b_np = b.contiguous().numpy()
        out = torch.empty_like(a)
        n = a.numel()
        a_buf = cl.Buffer(CTX, MF.READ_ONLY | MF.COPY_HOST_PTR, hostbuf=a_np)
        b_buf = cl.Buffer(CTX, MF.READ_ONLY | MF.COPY_HOST_PTR, hostbuf=b_np)
        out_buf = cl.Buffer(CTX, MF.WRITE_ONLY, out.numel() * out.element_size())
        local = 256
        global_size = (n + local - 1) // local * local
        ADD_SCALE(QUEUE, (global_size,), (local,), a_buf, b_buf, out_buf, np.int32(n), np.float32(self.scale))
        cl.enqueue_copy(QUEUE, out.numpy(), out_buf)  # blocking: the result is in `out` when it returns
        return out
