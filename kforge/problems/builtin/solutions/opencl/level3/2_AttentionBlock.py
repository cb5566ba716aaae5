import math

import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

# x + out(attention(qkv(LayerNorm(x)))): layer norm, the qkv projection (bias fused), attention with one
# work-item per (batch, head, query) keeping its softmax online (running maximum and sum, so the S x S scores
# never exist in memory), and the output projection with the residual fused. HD, the head size, is fixed when
# the program is built.
ATTN_SRC = r"""
__kernel void layer_norm(__global const float* x, __global const float* w, __global const float* b,
                         __global float* y, const int D, const float eps) {
    const long off = (long)get_global_id(0) * D;
    float s = 0.0f;
    for (int i = 0; i < D; i++) s += x[off + i];
    const float mean = s / D;
    float v = 0.0f;
    for (int i = 0; i < D; i++) { const float d = x[off + i] - mean; v = fma(d, d, v); }
    const float rstd = rsqrt(v / D + eps);
    for (int i = 0; i < D; i++) y[off + i] = (x[off + i] - mean) * rstd * w[i] + b[i];
}

__kernel void transpose(__global const float* src, __global float* dst, const int rows, const int cols) {
    const int c = get_global_id(0), r = get_global_id(1);
    if (r < rows && c < cols) dst[(long)c * rows + r] = src[(long)r * cols + c];
}

// Y = X @ WT + bias (+ R when has_res)
__kernel void linear(__global const float* X, __global const float* WT, __global const float* bias,
                     __global const float* R, __global float* Y, const int M, const int N, const int K,
                     const int has_res) {
    const int j = get_global_id(0), i0 = get_global_id(1) * 4;
    if (8 * j >= N || i0 >= M) return;
    const __global float* x0 = X + (long)min(i0, M - 1) * K;
    const __global float* x1 = X + (long)min(i0 + 1, M - 1) * K;
    const __global float* x2 = X + (long)min(i0 + 2, M - 1) * K;
    const __global float* x3 = X + (long)min(i0 + 3, M - 1) * K;
    float8 c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
    for (int k = 0; k < K; k++) {
        const float8 w = vload8(j, WT + (long)k * N);
        c0 = fma((float8)(x0[k]), w, c0);
        c1 = fma((float8)(x1[k]), w, c1);
        c2 = fma((float8)(x2[k]), w, c2);
        c3 = fma((float8)(x3[k]), w, c3);
    }
    const float8 b = vload8(j, bias);
    float8 acc[4] = {c0 + b, c1 + b, c2 + b, c3 + b};
    for (int r = 0; r < 4 && i0 + r < M; r++) {
        const long row = (long)(i0 + r) * N;
        vstore8(has_res ? acc[r] + vload8(j, R + row) : acc[r], j, Y + row);
    }
}

// qkv: (B*S, 3, H, HD) rows; y: (B*S, H*HD)
__kernel void attention(__global const float* qkv, __global float* y, const int S, const int H, const float scale) {
    const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
    const int D = H * HD;
    const __global float* q = qkv + ((long)(b * S + i) * 3) * D + h * HD;
    float qv[HD], acc[HD];
    for (int t = 0; t < HD; t++) { qv[t] = q[t] * scale; acc[t] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < S; j++) {
        const __global float* kj = qkv + ((long)(b * S + j) * 3 + 1) * D + h * HD;
        const __global float* vj = kj + D;
        float s = 0.0f;
        for (int t = 0; t < HD; t++) s = fma(qv[t], kj[t], s);
        const float m_new = fmax(m, s);
        const float corr = exp(m - m_new), p = exp(s - m_new);
        l = l * corr + p;
        for (int t = 0; t < HD; t++) acc[t] = fma(p, vj[t], acc[t] * corr);
        m = m_new;
    }
    __global float* out = y + (long)(b * S + i) * D + h * HD;
    for (int t = 0; t < HD; t++) out[t] = acc[t] / l;
}
"""


class ModelNew(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ctx = cl.create_some_context(interactive=False)
        self.queue = cl.CommandQueue(self.ctx)
        prg = cl.Program(self.ctx, ATTN_SRC).build(options=[f"-DHD={dim // heads}"])
        self.kernels = {name: cl.Kernel(prg, name) for name in ("layer_norm", "transpose", "linear", "attention")}

    def _in(self, t):
        return cl.Buffer(self.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=t.detach().contiguous().numpy())

    def _scratch(self, nbytes):
        return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, nbytes)

    def _linear(self, x_buf, lin, rows, res=None):
        n, k = lin.weight.shape
        wt = self._scratch(n * k * 4)
        self.kernels["transpose"](self.queue, (k, n), None, self._in(lin.weight), wt, np.int32(n), np.int32(k))
        y = self._scratch(rows * n * 4)
        self.kernels["linear"](self.queue, (n // 8, (rows + 3) // 4), None, x_buf, wt, self._in(lin.bias),
                               res if res is not None else y, y, np.int32(rows), np.int32(n), np.int32(k),
                               np.int32(res is not None))
        return y

    def forward(self, x):
        b, s, d = x.shape
        rows, hd = b * s, d // self.heads
        x_buf = self._in(x)
        h = self._scratch(rows * d * 4)
        self.kernels["layer_norm"](self.queue, (rows,), (1,), x_buf, self._in(self.norm.weight),
                                   self._in(self.norm.bias), h, np.int32(d), np.float32(self.norm.eps))
        qkv = self._linear(h, self.qkv, rows)
        att = self._scratch(rows * d * 4)
        self.kernels["attention"](self.queue, (s, self.heads, b), None, qkv, att, np.int32(s), np.int32(self.heads),
                                  np.float32(1.0 / math.sqrt(hd)))
        y_buf = self._linear(att, self.out, rows, res=x_buf)
        y = torch.empty(b, s, d)
        cl.enqueue_copy(self.queue, y.numpy(), y_buf)
        return y
