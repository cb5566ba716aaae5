import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

// LayerNorm over the last dimension; mean and variance in double (two passes) for accuracy. Storage
// (x, weight, bias, out) is float32, bfloat16 or float16, all the same; arithmetic is float or wider.
template <typename T>
static void layernorm_rows(const T* in, const T* w, const T* b, T* o, int64_t rows, int64_t cols, double eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = in + r * cols;
        T* orow = o + r * cols;
        double s = 0.0;
        for (int64_t j = 0; j < cols; ++j) s += static_cast<float>(xr[j]);
        const double mean = s / cols;
        double v = 0.0;
        for (int64_t j = 0; j < cols; ++j) { const double d = static_cast<float>(xr[j]) - mean; v += d * d; }
        const double rstd = 1.0 / std::sqrt(v / cols + eps);  // biased variance, as nn.LayerNorm
        for (int64_t j = 0; j < cols; ++j)
            orow[j] = static_cast<T>((float)((static_cast<float>(xr[j]) - mean) * rstd * static_cast<float>(w[j]) +
                                             static_cast<float>(b[j])));
    }
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    const auto st = x.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    TORCH_CHECK(weight.scalar_type() == st && bias.scalar_type() == st, "weight and bias must have x's dtype");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "layernorm_forward", [&] {
        layernorm_rows<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(),
                                 out.data_ptr<scalar_t>(), rows, cols, eps);
    });
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
