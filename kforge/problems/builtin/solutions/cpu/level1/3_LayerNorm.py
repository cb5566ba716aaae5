import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

// LayerNorm over the last dimension; mean and variance in double (two passes) for accuracy.
torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    const float* in = xc.data_ptr<float>();
    const float* w = wc.data_ptr<float>();
    const float* b = bc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = in + r * cols;
        float* orow = o + r * cols;
        double s = 0.0;
        for (int64_t j = 0; j < cols; ++j) s += xr[j];
        const double mean = s / cols;
        double v = 0.0;
        for (int64_t j = 0; j < cols; ++j) { const double d = xr[j] - mean; v += d * d; }
        const double rstd = 1.0 / std::sqrt(v / cols + eps);  // biased variance, as nn.LayerNorm
        for (int64_t j = 0; j < cols; ++j) orow[j] = (float)((xr[j] - mean) * rstd * w[j] + b[j]);
    }
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cpu_layernorm", cpp_sources=[cpp_source], functions=["layernorm_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return _ext.layernorm_forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
