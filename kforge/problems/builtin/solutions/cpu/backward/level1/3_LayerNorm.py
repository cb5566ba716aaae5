# Hand-written solution (kforge's oracle, not an LLM): LayerNorm's forward and backward as C++ kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <vector>
#include <omp.h>

// LayerNorm over the last dimension; mean and variance in double (two passes). Keeps each row's mean and
// 1/std for the backward.
std::vector<torch::Tensor> layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    auto mean = torch::empty({rows}, xc.options());
    auto rstd = torch::empty({rows}, xc.options());
    const float* in = xc.data_ptr<float>();
    const float* w = wc.data_ptr<float>();
    const float* b = bc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    float* mp = mean.data_ptr<float>();
    float* rp = rstd.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = in + r * cols;
        float* orow = o + r * cols;
        double s = 0.0;
        for (int64_t j = 0; j < cols; ++j) s += xr[j];
        const double mu = s / cols;
        double v = 0.0;
        for (int64_t j = 0; j < cols; ++j) { const double d = xr[j] - mu; v += d * d; }
        const double rs = 1.0 / std::sqrt(v / cols + eps);  // biased variance, as nn.LayerNorm
        mp[r] = (float)mu;
        rp[r] = (float)rs;
        for (int64_t j = 0; j < cols; ++j) orow[j] = (float)((xr[j] - mu) * rs * w[j] + b[j]);
    }
    return {out, mean, rstd};
}

// dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)) per row; dweight = sum over rows of g*xhat and
// dbias = sum of g, each thread summing its rows in double and the threads' sums added at the end.
std::vector<torch::Tensor> layernorm_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor weight,
                                              torch::Tensor mean, torch::Tensor rstd) {
    auto gc = grad.contiguous();
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    const int64_t cols = xc.size(-1), rows = xc.numel() / cols;
    auto dx = torch::empty_like(xc);
    auto dw = torch::empty({cols}, xc.options());
    auto db = torch::empty({cols}, xc.options());
    const float* g = gc.data_ptr<float>();
    const float* xp = xc.data_ptr<float>();
    const float* w = wc.data_ptr<float>();
    const float* mp = mean.data_ptr<float>();
    const float* rp = rstd.data_ptr<float>();
    float* d = dx.data_ptr<float>();
    const int threads = omp_get_max_threads();
    std::vector<double> pw((size_t)threads * cols, 0.0), pb((size_t)threads * cols, 0.0);
    #pragma omp parallel
    {
        double* tw = pw.data() + (size_t)omp_get_thread_num() * cols;
        double* tb = pb.data() + (size_t)omp_get_thread_num() * cols;
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const float* gr = g + r * cols;
            const float* xr = xp + r * cols;
            const double mu = mp[r], rs = rp[r];
            double a = 0.0, c = 0.0;
            for (int64_t j = 0; j < cols; ++j) {
                const double xh = (xr[j] - mu) * rs, gw = (double)gr[j] * w[j];
                a += gw;
                c += gw * xh;
                tw[j] += gr[j] * xh;
                tb[j] += gr[j];
            }
            a /= cols;
            c /= cols;
            for (int64_t j = 0; j < cols; ++j) {
                const double xh = (xr[j] - mu) * rs;
                d[r * cols + j] = (float)(rs * ((double)gr[j] * w[j] - a - xh * c));
            }
        }
    }
    float* dwp = dw.data_ptr<float>();
    float* dbp = db.data_ptr<float>();
    for (int64_t j = 0; j < cols; ++j) {
        double sw = 0.0, sb = 0.0;
        for (int t = 0; t < threads; ++t) { sw += pw[(size_t)t * cols + j]; sb += pb[(size_t)t * cols + j]; }
        dwp[j] = (float)sw;
        dbp[j] = (float)sb;
    }
    return {dx, dw, db};
}
"""

_ext = load_inline(name="kf_oracle_cpu_layernorm_bwd", cpp_sources=[cpp_source],
                   functions=["layernorm_forward", "layernorm_backward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = _ext.layernorm_forward(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = _ext.layernorm_backward(grad, x, weight, mean, rstd)
        return dx, dw, db, None


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)  # the reference's parameters, by the same names

    def forward(self, x):
        return LayerNormFunction.apply(x, self.norm.weight, self.norm.bias, self.norm.eps)
