# expect: correct
# requires: pyopencl
# problem: level1/5_SumReduction BATCH=4 DIM1=64 DIM2=96
# why: partial sums over blocks of rows in an OpenCL kernel, the few partials finished with torch.sum
import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

PARTIAL = r'''
__kernel void partial_sums(__global const float *x, __global float *part, int rows, int cols, int block) {
    int c = get_global_id(0);
    int blk = get_global_id(1);
    int b = get_global_id(2);
    int nblk = get_global_size(1);
    if (c >= cols) return;
    float acc = 0.0f;
    for (int r = blk * block; r < min(rows, (blk + 1) * block); ++r)
        acc += x[((long)b * rows + r) * cols + c];
    part[((long)b * nblk + blk) * cols + c] = acc;
}
'''

ctx = cl.create_some_context(interactive=False)
queue = cl.CommandQueue(ctx)
prog = cl.Program(ctx, PARTIAL).build()


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        b, rows, cols = x.shape
        block = 16
        nblk = (rows + block - 1) // block
        part = np.empty((b, nblk, cols), dtype=np.float32)
        mf = cl.mem_flags
        x_g = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x.contiguous().numpy())
        p_g = cl.Buffer(ctx, mf.WRITE_ONLY, part.nbytes)
        prog.partial_sums(queue, (cols, nblk, b), None, x_g, p_g, np.int32(rows), np.int32(cols), np.int32(block))
        cl.enqueue_copy(queue, part, p_g)
        return torch.from_numpy(part).sum(dim=1, keepdim=True)
