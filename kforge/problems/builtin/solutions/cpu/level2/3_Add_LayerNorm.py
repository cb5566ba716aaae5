import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <vector>

// LayerNorm(x + y) over the last dimension. The sum is formed in float (as the reference does for
// float32) into a per-thread row buffer; mean and variance in double (two passes). Storage (x, y, weight,
// bias, out) is float32, bfloat16 or float16, all alike; the output is rounded once on store.
template <typename T>
static void add_layernorm_rows(const T* xp, const T* yp, const T* w, const T* b, T* o, int64_t rows, int64_t cols,
                               double eps) {
    #pragma omp parallel
    {
        std::vector<float> z(cols);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const T* xr = xp + r * cols;
            const T* yr = yp + r * cols;
            double s = 0.0;
            for (int64_t j = 0; j < cols; ++j) {
                z[j] = static_cast<float>(xr[j]) + static_cast<float>(yr[j]);
                s += z[j];
            }
            const double mean = s / cols;
            double v = 0.0;
            for (int64_t j = 0; j < cols; ++j) { const double d = z[j] - mean; v += d * d; }
            const double rstd = 1.0 / std::sqrt(v / cols + eps);
            T* orow = o + r * cols;
            for (int64_t j = 0; j < cols; ++j)
                orow[j] = static_cast<T>((float)((z[j] - mean) * rstd * static_cast<float>(w[j]) +
                                                 static_cast<float>(b[j])));
        }
    }
}

torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor y, torch::Tensor weight, torch::Tensor bias,
                                    double eps) {
    const auto st = x.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    TORCH_CHECK(y.scalar_type() == st && weight.scalar_type() == st && bias.scalar_type() == st,
                "y, weight and bias must have x's dtype");
    TORCH_CHECK(x.sizes() == y.sizes(), "x and y must have the same shape");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto yc = y.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "add_layernorm_forward", [&] {
        add_layernorm_rows<scalar_t>(xc.data_ptr<scalar_t>(), yc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(),
                                     bc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows, cols, eps);
    });
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
