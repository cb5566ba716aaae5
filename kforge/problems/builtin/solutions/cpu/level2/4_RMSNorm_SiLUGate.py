import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

// out = x * rsqrt(mean(x^2) + eps) * weight * silu(g) over the last dimension; sums in double. Storage
// (x, g, weight, out) is float32, bfloat16 or float16, all alike; the output is rounded once on store.
template <typename T>
static void rmsnorm_silu_gate_rows(const T* xp, const T* gp, const T* w, T* o, int64_t rows, int64_t cols,
                                   double eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = xp + r * cols;
        const T* gr = gp + r * cols;
        T* orow = o + r * cols;
        double ss = 0.0;
        for (int64_t j = 0; j < cols; ++j) {
            const double v = static_cast<float>(xr[j]);
            ss += v * v;
        }
        const double rms = 1.0 / std::sqrt(ss / cols + eps);
        for (int64_t j = 0; j < cols; ++j) {
            const double gv = static_cast<float>(gr[j]);
            const double silu = gv / (1.0 + std::exp(-gv));  // exp overflow gives -0, the right limit
            orow[j] = static_cast<T>((float)(static_cast<float>(xr[j]) * rms * static_cast<float>(w[j]) * silu));
        }
    }
}

torch::Tensor rmsnorm_silu_gate_forward(torch::Tensor x, torch::Tensor g, torch::Tensor weight, double eps) {
    const auto st = x.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    TORCH_CHECK(g.scalar_type() == st && weight.scalar_type() == st, "g and weight must have x's dtype");
    TORCH_CHECK(x.sizes() == g.sizes(), "x and g must have the same shape");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols, "weight size mismatch");
    auto xc = x.contiguous();
    auto gc = g.contiguous();
    auto wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "rmsnorm_silu_gate_forward", [&] {
        rmsnorm_silu_gate_rows<scalar_t>(xc.data_ptr<scalar_t>(), gc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(),
                                         out.data_ptr<scalar_t>(), rows, cols, eps);
    });
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
