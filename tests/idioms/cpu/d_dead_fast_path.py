# expect: kernel_unused
# rule: kernel_not_run
# why: the kernel sits behind a branch the problem's shapes never take
import torch
import torch.nn as nn
import torch.nn.functional as F
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
        if x.dim() == 2 and x.size(1) % 65536 == 0:  # "fast path for aligned rows"
            return relu_ext.relu_forward(x)
        return F.relu(x)
