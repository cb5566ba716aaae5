# expect: correct
# requires: pyopencl
# why: zero-copy buffers over the tensors' own memory (USE_HOST_PTR), the result mapped back for the host
import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

KSRC = """
__kernel void relu_inplace_out(__global const float *src, __global float *dst) {
    size_t gid = get_global_id(0);
    float v = src[gid];
    dst[gid] = v > 0 ? v : 0;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        platform = cl.get_platforms()[0]
        device = platform.get_devices()[0]
        self.context = cl.Context([device])
        self.q = cl.CommandQueue(self.context, device)
        self.program = cl.Program(self.context, KSRC).build()
        self.knl = self.program.relu_inplace_out

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        flags = cl.mem_flags
        src = cl.Buffer(self.context, flags.READ_ONLY | flags.USE_HOST_PTR, hostbuf=x.numpy())
        dst = cl.Buffer(self.context, flags.WRITE_ONLY | flags.USE_HOST_PTR, hostbuf=y.numpy())
        self.knl.set_args(src, dst)
        cl.enqueue_nd_range_kernel(self.q, self.knl, (x.numel(),), None)
        # map so the host sees the device's writes (a no-op copy where the device shares host memory)
        mapped, _ = cl.enqueue_map_buffer(self.q, dst, cl.map_flags.READ, 0, (x.numel(),), np.float32)
        out = torch.from_numpy(mapped.copy()).view_as(x)
        del mapped
        return out
