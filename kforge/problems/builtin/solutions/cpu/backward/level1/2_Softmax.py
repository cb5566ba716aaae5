# Hand-written solution (kforge's oracle, not an LLM): softmax's forward and backward as C++ kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <algorithm>

// Softmax over the last dimension: subtract the row max, sum the exponentials in double.
torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "non-empty last dimension expected");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t cols = xc.size(-1), rows = xc.numel() / cols;
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = in + r * cols;
        float* orow = o + r * cols;
        float m = xr[0];
        for (int64_t j = 1; j < cols; ++j) m = std::max(m, xr[j]);
        double s = 0.0;
        for (int64_t j = 0; j < cols; ++j) {
            const float e = std::exp(xr[j] - m);
            orow[j] = e;
            s += e;
        }
        const float inv = (float)(1.0 / s);
        for (int64_t j = 0; j < cols; ++j) orow[j] *= inv;
    }
    return out;
}

// dx = y * (g - sum(g * y)) per row, the dot product in double.
torch::Tensor softmax_backward(torch::Tensor grad, torch::Tensor y) {
    auto gc = grad.contiguous();
    TORCH_CHECK(gc.scalar_type() == torch::kFloat32 && gc.sizes() == y.sizes(), "float32 of y's shape expected");
    auto dx = torch::empty_like(y);
    const int64_t cols = y.size(-1), rows = y.numel() / cols;
    const float* g = gc.data_ptr<float>();
    const float* yp = y.data_ptr<float>();
    float* d = dx.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* gr = g + r * cols;
        const float* yr = yp + r * cols;
        double dot = 0.0;
        for (int64_t j = 0; j < cols; ++j) dot += (double)gr[j] * yr[j];
        const float s = (float)dot;
        for (int64_t j = 0; j < cols; ++j) d[r * cols + j] = yr[j] * (gr[j] - s);
    }
    return dx;
}
"""

_ext = load_inline(name="kf_oracle_cpu_softmax_bwd", cpp_sources=[cpp_source],
                   functions=["softmax_forward", "softmax_backward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class SoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = _ext.softmax_forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _ext.softmax_backward(grad, y)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return SoftmaxFunction.apply(x)
