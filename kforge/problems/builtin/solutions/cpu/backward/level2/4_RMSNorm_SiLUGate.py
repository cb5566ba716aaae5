# Hand-written solution (kforge's oracle, not an LLM): the gated RMSNorm's forward and backward as C++ kernels
# behind a torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <vector>
#include <omp.h>

static inline double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// out = x * r * w * silu(g), r = rsqrt(mean(x^2) + eps) over the last dimension; keeps r for the backward.
std::vector<torch::Tensor> gate_forward(torch::Tensor x, torch::Tensor g, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && g.scalar_type() == torch::kFloat32, "float32 expected");
    TORCH_CHECK(x.sizes() == g.sizes(), "x and g must have the same shape");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols, "weight size mismatch");
    auto xc = x.contiguous(), gc = g.contiguous(), wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    auto rinv = torch::empty({rows}, xc.options());
    const float *xp = xc.data_ptr<float>(), *gp = gc.data_ptr<float>(), *w = wc.data_ptr<float>();
    float *o = out.data_ptr<float>(), *rp = rinv.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = xp + r * cols, *gr = gp + r * cols;
        double ss = 0.0;
        for (int64_t j = 0; j < cols; ++j) ss += (double)xr[j] * xr[j];
        const double ri = 1.0 / std::sqrt(ss / cols + eps);
        rp[r] = (float)ri;
        for (int64_t j = 0; j < cols; ++j) {
            const double gv = gr[j];
            o[r * cols + j] = (float)(xr[j] * ri * w[j] * gv * sigmoid(gv));
        }
    }
    return {out, rinv};
}

// With u = dy * w * silu(g): dx = r*u - r^3 * x * mean(u*x); dg = dy * x*r*w * silu'(g); dw = sum over rows of
// dy * x*r * silu(g) (per-thread double sums, added at the end).
std::vector<torch::Tensor> gate_backward(torch::Tensor dy, torch::Tensor x, torch::Tensor g, torch::Tensor weight,
                                         torch::Tensor rinv) {
    auto dyc = dy.contiguous(), xc = x.contiguous(), gc = g.contiguous(), wc = weight.contiguous();
    const int64_t cols = xc.size(-1), rows = xc.numel() / cols;
    auto dx = torch::empty_like(xc), dg = torch::empty_like(xc), dw = torch::empty({cols}, xc.options());
    const float *d = dyc.data_ptr<float>(), *xp = xc.data_ptr<float>(), *gp = gc.data_ptr<float>();
    const float *w = wc.data_ptr<float>(), *rp = rinv.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *dgp = dg.data_ptr<float>();
    const int threads = omp_get_max_threads();
    std::vector<double> part((size_t)threads * cols, 0.0);
    #pragma omp parallel
    {
        double* tw = part.data() + (size_t)omp_get_thread_num() * cols;
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t o = r * cols;
            const double ri = rp[r];
            double dot = 0.0;
            for (int64_t j = 0; j < cols; ++j) {
                const double gv = gp[o + j], s = sigmoid(gv), silu = gv * s;
                const double u = (double)d[o + j] * w[j] * silu;
                dot += u * xp[o + j];
                tw[j] += (double)d[o + j] * xp[o + j] * ri * silu;
                dgp[o + j] = (float)((double)d[o + j] * xp[o + j] * ri * w[j] * s * (1.0 + gv * (1.0 - s)));
            }
            const double k = ri * ri * ri * dot / cols;
            for (int64_t j = 0; j < cols; ++j) {
                const double gv = gp[o + j];
                const double u = (double)d[o + j] * w[j] * gv * sigmoid(gv);
                dxp[o + j] = (float)(ri * u - k * xp[o + j]);
            }
        }
    }
    float* dwp = dw.data_ptr<float>();
    for (int64_t j = 0; j < cols; ++j) {
        double s = 0.0;
        for (int t = 0; t < threads; ++t) s += part[(size_t)t * cols + j];
        dwp[j] = (float)s;
    }
    return {dx, dg, dw};
}
"""

_ext = load_inline(name="kf_oracle_cpu_rmsnorm_silu_gate_bwd", cpp_sources=[cpp_source],
                   functions=["gate_forward", "gate_backward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class GatedRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g, weight, eps):
        out, rinv = _ext.gate_forward(x, g, weight, eps)
        ctx.save_for_backward(x, g, weight, rinv)
        return out

    @staticmethod
    def backward(ctx, dy):
        x, g, weight, rinv = ctx.saved_tensors
        dx, dg, dw = _ext.gate_backward(dy, x, g, weight, rinv)
        return dx, dg, dw, None


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))  # the reference's parameter, by the same name

    def forward(self, x, g):
        return GatedRMSNormFunction.apply(x, g, self.weight, self.eps)
