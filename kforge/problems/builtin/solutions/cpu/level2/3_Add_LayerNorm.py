import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <vector>

// LayerNorm(x + y) over the last dimension. The sum is formed in float (as the reference does) into
// a per-thread row buffer; mean and variance in double (two passes).
torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor y, torch::Tensor weight, torch::Tensor bias,
                                    double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kFloat32, "float32 expected");
    TORCH_CHECK(x.sizes() == y.sizes(), "x and y must have the same shape");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto yc = y.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    const float* xp = xc.data_ptr<float>();
    const float* yp = yc.data_ptr<float>();
    const float* w = wc.data_ptr<float>();
    const float* b = bc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    #pragma omp parallel
    {
        std::vector<float> z(cols);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = xp + r * cols;
            const float* yr = yp + r * cols;
            double s = 0.0;
            for (int64_t j = 0; j < cols; ++j) { z[j] = xr[j] + yr[j]; s += z[j]; }
            const double mean = s / cols;
            double v = 0.0;
            for (int64_t j = 0; j < cols; ++j) { const double d = z[j] - mean; v += d * d; }
            const double rstd = 1.0 / std::sqrt(v / cols + eps);
            float* orow = o + r * cols;
            for (int64_t j = 0; j < cols; ++j) orow[j] = (float)((z[j] - mean) * rstd * w[j] + b[j]);
        }
    }
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cpu_add_layernorm", cpp_sources=[cpp_source], functions=["add_layernorm_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, y):
        return _ext.add_layernorm_forward(x, y, self.norm.weight, self.norm.bias, self.norm.eps)
