# A model's ReLU registered as a PyTorch operator (TORCH_LIBRARY, built with is_python_module=False) and called
# through torch.ops, as models write for torch.compile: the operator is the candidate's own kernel.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <torch/library.h>

torch::Tensor fused_relu(const torch::Tensor& x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = xc.numel();
    at::parallel_for(0, n, 8192, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    });
    return out;
}

TORCH_LIBRARY(kforge_test_ops, m) {
    m.def("fused_relu(Tensor x) -> Tensor", &fused_relu);
}
"""

load_inline(name="kforge_test_ops", cpp_sources=cpp_source, is_python_module=False, verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.ops.kforge_test_ops.fused_relu.default(x)
