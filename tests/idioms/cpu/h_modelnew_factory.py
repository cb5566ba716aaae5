# expect: correct
# why: ModelNew comes out of a factory that compiles the extension and builds the class around it
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

RELU_SRC = r"""
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


def _compile_extension():
    return load_inline(
        name="kf_idiom_relu",
        cpp_sources=[RELU_SRC],
        functions=["relu_forward"],
        extra_cflags=["-O3", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
        verbose=False,
    )


def make_model_class():
    ext = _compile_extension()

    class _OptimizedReLU(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()

        def forward(self, x):
            return ext.relu_forward(x)

    return _OptimizedReLU


ModelNew = make_model_class()
