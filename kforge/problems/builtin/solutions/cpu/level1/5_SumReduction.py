import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <vector>

// Sum over `dim` with keepdim: view x as (outer, R, inner) and add the R slices into double rows.
// Storage is float32, bfloat16 or float16; each element is widened on load, each sum rounded once on store.
template <typename T>
static void sum_slices(const T* in, T* o, int64_t outer, int64_t R, int64_t inner) {
    constexpr int64_t CH = 1024;  // inner columns per task, so small `outer` still spreads over threads
    const int64_t nch = (inner + CH - 1) / CH;
    #pragma omp parallel
    {
        std::vector<double> acc(CH);
        #pragma omp for collapse(2) schedule(static)
        for (int64_t p = 0; p < outer; ++p)
            for (int64_t c = 0; c < nch; ++c) {
                const int64_t j0 = c * CH, n = std::min(CH, inner - j0);
                for (int64_t j = 0; j < n; ++j) acc[j] = 0.0;
                for (int64_t r = 0; r < R; ++r) {
                    const T* row = in + (p * R + r) * inner + j0;
                    for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<float>(row[j]);
                }
                for (int64_t j = 0; j < n; ++j) o[p * inner + j0 + j] = static_cast<T>((float)acc[j]);
            }
    }
}

torch::Tensor sum_forward(torch::Tensor x, int64_t dim) {
    const auto st = x.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    if (dim < 0) dim += x.dim();
    TORCH_CHECK(dim >= 0 && dim < x.dim(), "dim out of range");
    auto xc = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < xc.dim(); ++d) inner *= xc.size(d);
    const int64_t R = xc.size(dim);
    auto sizes = xc.sizes().vec();
    sizes[dim] = 1;
    auto out = torch::empty(sizes, xc.options());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "sum_forward", [&] {
        sum_slices<scalar_t>(xc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), outer, R, inner);
    });
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cpu_sum", cpp_sources=[cpp_source], functions=["sum_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_forward(x, self.dim)
