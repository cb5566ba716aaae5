# expect: kernel_unused
# rule: kernel_sliver
# why: PyTorch computes all of it, then the kernel's result overwrites one row of the answer
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

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


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.relu(x)
        out[:1] = relu_ext.relu_forward(x[:1])
        return out
