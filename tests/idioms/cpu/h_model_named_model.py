# expect: correct
# why: the candidate names its own class `Model` (shadowing the problem's, in the namespace they share) and aliases it
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor input) {
    TORCH_CHECK(input.scalar_type() == torch::kFloat32, "relu_forward expects float32");
    auto x = input.contiguous();
    auto output = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = output.data_ptr<float>();
    const int64_t n = x.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        dst[i] = src[i] > 0.0f ? src[i] : 0.0f;
    }
    return output;
}
"""

_relu = load_inline(
    name="kf_idiom_relu",
    cpp_sources=[cpp_src],
    functions=["relu_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x):
        return _relu.relu_forward(x)


ModelNew = Model
