import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

# conv3x3 (pad 1) + bias -> ReLU -> 2x2 max-pool, fused: each work-item owns one pooled pixel for eight output
# channels (float8), computes the four conv outputs under it and writes only their maximum after the ReLU.
src = r"""
__kernel void relayout(__global const float* w, __global float* wt, const int co_n, const int ci_n) {
    const int co = get_global_id(0), r = get_global_id(1);
    if (co < co_n && r < ci_n * 9) wt[(long)r * co_n + co] = w[(long)co * ci_n * 9 + r];
}

__kernel void conv_relu_pool(__global const float* x, __global const float* wt, __global const float* bias,
                             __global float* y, const int ci_n, const int co_n, const int H, const int W) {
    const int pw = get_global_id(0), ph = get_global_id(1);
    const int groups = co_n / 8;
    const int n = get_global_id(2) / groups, cb = get_global_id(2) % groups;
    const int PH = H / 2, PW = W / 2;
    if (pw >= PW || ph >= PH) return;
    const int h0 = 2 * ph, w0 = 2 * pw;
    float8 a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f;
    for (int ci = 0; ci < ci_n; ci++) {
        const __global float* xp = x + ((long)n * ci_n + ci) * H * W;
        float v[4][4];  // the 4x4 input patch under the 2x2 conv outputs
        for (int dy = 0; dy < 4; dy++) {
            const int hh = h0 + dy - 1;
            for (int dx = 0; dx < 4; dx++) {
                const int ww = w0 + dx - 1;
                v[dy][dx] = (hh >= 0 && hh < H && ww >= 0 && ww < W) ? xp[(long)hh * W + ww] : 0.0f;
            }
        }
        for (int kh = 0; kh < 3; kh++)
            for (int kw = 0; kw < 3; kw++) {
                const float8 wv = vload8(cb, wt + (long)((ci * 3 + kh) * 3 + kw) * co_n);
                a00 = fma((float8)(v[kh][kw]), wv, a00);
                a01 = fma((float8)(v[kh][kw + 1]), wv, a01);
                a10 = fma((float8)(v[kh + 1][kw]), wv, a10);
                a11 = fma((float8)(v[kh + 1][kw + 1]), wv, a11);
            }
    }
    const float8 b = vload8(cb, bias);
    const float8 m = fmax(fmax(fmax(a00 + b, a01 + b), fmax(a10 + b, a11 + b)), 0.0f);
    float o[8];
    vstore8(m, 0, o);
    for (int c = 0; c < 8; c++)
        y[(((long)n * co_n + cb * 8 + c) * PH + ph) * PW + pw] = o[c];
}
"""

context = cl.create_some_context(interactive=False)
cmdq = cl.CommandQueue(context)
prog = cl.Program(context, src).build()
K_RELAYOUT = cl.Kernel(prog, "relayout")
K_FUSED = cl.Kernel(prog, "conv_relu_pool")


def to_device(t: torch.Tensor) -> cl.Buffer:
    return cl.Buffer(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=t.detach().contiguous().numpy())


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=True)
        self.pool = nn.MaxPool2d(2)  # kept for the state dict's shape; the kernel pools

    def forward(self, x):
        n, ci, h, w = x.shape
        co = self.conv.out_channels
        y = torch.empty(n, co, h // 2, w // 2)
        x_buf, w_buf, b_buf = to_device(x), to_device(self.conv.weight), to_device(self.conv.bias)
        wt_buf = cl.Buffer(context, cl.mem_flags.READ_WRITE, co * ci * 9 * 4)
        y_buf = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, y.numel() * 4)
        K_RELAYOUT(cmdq, (co, ci * 9), None, w_buf, wt_buf, np.int32(co), np.int32(ci))
        K_FUSED(cmdq, (w // 2, h // 2, n * (co // 8)), None, x_buf, wt_buf, b_buf, y_buf,
                np.int32(ci), np.int32(co), np.int32(h), np.int32(w))
        cl.enqueue_copy(cmdq, y.numpy(), y_buf)
        return y
