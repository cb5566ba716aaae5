# expect: not_correct
# why: PyTorch computes relu; a kernel then "post-processes" the result by multiplying it by one in place
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
void scale_(torch::Tensor y, double s) {
    float* p = y.data_ptr<float>();
    const int64_t n = y.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] * static_cast<float>(s);
}
"""
post = load_inline(name="kf_idiom_scale", cpp_sources=[src], functions=["scale_"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.relu(x).contiguous()
        post.scale_(y, 1.0)
        return y
