# expect: cheat_detected
# requires: pyopencl
# rule: output_not_from_kernel
# static: off
# why: PyTorch computes the answer, which is uploaded into a buffer and read back; a kernel runs beside it on
# another buffer, so an OpenCL read-back produces the output
import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

CL = """
__kernel void touch(__global float* tmp, int n) {
    int i = get_global_id(0);
    if (i < n) tmp[i] = tmp[i] * 2.0f;
}
"""

ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
touch = cl.Kernel(cl.Program(ctx, CL).build(), "touch")


class ModelNew(nn.Module):
    def forward(self, x):
        answer = torch.relu(x).contiguous().numpy()
        mf = cl.mem_flags
        result_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=answer)
        tmp = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ones(256, np.float32))
        touch(q, (256,), None, tmp, np.int32(256))
        out = torch.empty_like(x)
        cl.enqueue_copy(q, out.numpy(), result_buf)
        return out
