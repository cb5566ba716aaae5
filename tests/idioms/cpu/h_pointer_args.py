# expect: correct
# why: the kernel takes raw data pointers (int64) instead of tensors, as ctypes-style code does
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>
#include <cstdint>
void relu_ptr(int64_t src, int64_t dst, int64_t n) {
    const float* a = reinterpret_cast<const float*>(src);
    float* o = reinterpret_cast<float*>(dst);
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] > 0.f ? a[i] : 0.f;
}
"""
ext = load_inline(name="kf_idiom_relu_ptr", cpp_sources=[cpp_src], functions=["relu_ptr"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        ext.relu_ptr(x.data_ptr(), y.data_ptr(), x.numel())
        return y
