# expect: correct
# why: the class has a name of its own and the program ends with `ModelNew = FusedReLU`, as KernelBench reads it
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# ---------------------------------------------------------------------------
# Custom C++ kernel: elementwise ReLU, OpenMP-parallel
# ---------------------------------------------------------------------------
relu_cpp_source = r"""
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

relu_ext = load_inline(
    name="kf_idiom_relu",
    cpp_sources=[relu_cpp_source],
    functions=["relu_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class FusedReLU(nn.Module):
    """Drop-in replacement for the reference model using the custom kernel."""

    def __init__(self):
        super(FusedReLU, self).__init__()
        self.op = relu_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op.relu_forward(x)


# The evaluation harness looks for `ModelNew`.
ModelNew = FusedReLU
