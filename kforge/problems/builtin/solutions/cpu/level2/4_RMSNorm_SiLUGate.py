import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

// out = x * rsqrt(mean(x^2) + eps) * weight * silu(g) over the last dimension; sums in double.
torch::Tensor rmsnorm_silu_gate_forward(torch::Tensor x, torch::Tensor g, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && g.scalar_type() == torch::kFloat32, "float32 expected");
    TORCH_CHECK(x.sizes() == g.sizes(), "x and g must have the same shape");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols, "weight size mismatch");
    auto xc = x.contiguous();
    auto gc = g.contiguous();
    auto wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    const float* xp = xc.data_ptr<float>();
    const float* gp = gc.data_ptr<float>();
    const float* w = wc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * cols;
        const float* gr = gp + r * cols;
        float* orow = o + r * cols;
        double ss = 0.0;
        for (int64_t j = 0; j < cols; ++j) ss += (double)xr[j] * xr[j];
        const double rms = 1.0 / std::sqrt(ss / cols + eps);
        for (int64_t j = 0; j < cols; ++j) {
            const double gv = gr[j];
            const double silu = gv / (1.0 + std::exp(-gv));  // exp overflow gives -0, the right limit
            orow[j] = (float)(xr[j] * rms * w[j] * silu);
        }
    }
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cpu_rmsnorm_silu_gate", cpp_sources=[cpp_source],
                   functions=["rmsnorm_silu_gate_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x, g):
        return _ext.rmsnorm_silu_gate_forward(x, g, self.weight, self.eps)
