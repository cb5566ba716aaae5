# expect: correct
# requires: pyopencl
# why: pyopencl's ElementwiseKernel with the candidate's own C expression, on pyopencl arrays: its kernel
import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import torch
import torch.nn as nn
from pyopencl.elementwise import ElementwiseKernel

_ctx = cl.create_some_context(interactive=False)
_queue = cl.CommandQueue(_ctx)

# relu as an elementwise expression; pyopencl generates the loop and the kernel around it
relu_ew = ElementwiseKernel(_ctx, "const float *x, float *y", "y[i] = x[i] > 0.0f ? x[i] : 0.0f", "relu_ew")


class ModelNew(nn.Module):
    def forward(self, x):
        x_dev = cla.to_device(_queue, x.contiguous().numpy())
        y_dev = cla.empty_like(x_dev)
        relu_ew(x_dev, y_dev)
        return torch.from_numpy(y_dev.get())
