import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The kernel: one fused pass over memory with OpenMP threads; load_inline adds #include <torch/extension.h>.
cpp_source = r"""
#include <omp.h>

torch::Tensor add_scale(torch::Tensor a, torch::Tensor b, double scale) {
    TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "float32 expected");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(ac);  // every element is written below
    const float* pa = ac.data_ptr<float>();
    const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const float s = static_cast<float>(scale);
    const int64_t n = ac.numel();
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        po[i] = (pa[i] + pb[i]) * s;
    }
    return out;
}
"""

add_scale_ext = load_inline(
    name="add_scale_ext",
    cpp_sources=[cpp_source],
    functions=["add_scale"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same constructor and forward signature as Model; the work happens in the C++ kernel."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_scale_ext.add_scale(a, b, self.scale)
