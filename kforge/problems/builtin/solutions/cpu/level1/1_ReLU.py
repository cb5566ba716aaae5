import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
// float32, bfloat16 or float16 storage; the comparison is done in float (exact for all three).
template <typename T>
static void relu_rows(const T* in, T* o, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(in[i]);
        o[i] = static_cast<T>(v > 0.f ? v : 0.f);
    }
}

torch::Tensor relu_forward(torch::Tensor x) {
    const auto st = x.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "relu_forward", [&] {
        relu_rows<scalar_t>(xc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), xc.numel());
    });
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cpu_relu", cpp_sources=[cpp_source], functions=["relu_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_forward(x)
