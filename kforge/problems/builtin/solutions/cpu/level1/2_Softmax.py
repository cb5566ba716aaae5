import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <algorithm>
#include <vector>

// Softmax over the last dimension: subtract the row max, sum the exponentials in double. Storage is
// float32, bfloat16 or float16; the exponentials are kept in a float row buffer, so a reduced-precision
// output is rounded once, after the division.
template <typename T>
static void softmax_rows(const T* in, T* o, int64_t rows, int64_t cols) {
    #pragma omp parallel
    {
        std::vector<float> e(cols);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const T* xr = in + r * cols;
            T* orow = o + r * cols;
            float m = static_cast<float>(xr[0]);
            for (int64_t j = 1; j < cols; ++j) m = std::max(m, static_cast<float>(xr[j]));
            double s = 0.0;
            for (int64_t j = 0; j < cols; ++j) {
                e[j] = std::exp(static_cast<float>(xr[j]) - m);
                s += e[j];
            }
            const float inv = (float)(1.0 / s);
            for (int64_t j = 0; j < cols; ++j) orow[j] = static_cast<T>(e[j] * inv);
        }
    }
}

torch::Tensor softmax_forward(torch::Tensor x) {
    const auto st = x.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "non-empty last dimension expected");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t cols = xc.size(-1), rows = xc.numel() / cols;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "softmax_forward", [&] {
        softmax_rows<scalar_t>(xc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows, cols);
    });
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cpu_softmax", cpp_sources=[cpp_source], functions=["softmax_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.softmax_forward(x)
