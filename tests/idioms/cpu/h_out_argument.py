# expect: correct
# why: Python allocates the output and the kernel fills it in place, returning nothing
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>
void relu_out(torch::Tensor x, torch::Tensor out) {
    TORCH_CHECK(x.is_contiguous() && out.is_contiguous(), "contiguous tensors only");
    const float* a = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = x.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] > 0.f ? a[i] : 0.f;
}
"""
ext = load_inline(name="kf_idiom_relu_out", cpp_sources=[cpp_src], functions=["relu_out"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        ext.relu_out(x, out)
        return out
