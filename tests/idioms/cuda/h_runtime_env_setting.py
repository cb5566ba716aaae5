# expect: correct
# why: a runtime setting that changes no result (CUDA_MODULE_LOADING) set before torch loads, as build settings are
import os

os.environ["CUDA_MODULE_LOADING"] = "LAZY"

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

void launch_relu(const float* x, float* y, int64_t n) {
    const int threads = 256;
    const int64_t want = (n + threads - 1) / threads;
    const int blocks = (int)(want < 65535 ? want : 65535);
    relu_kernel<<<blocks, threads>>>(x, y, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
void launch_relu(const float* x, float* y, int64_t n);

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward expects float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    launch_relu(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel());
    return y;
}
"""

relu_module = load_inline(
    name="kf_idiom_cuda_relu_lazy_loading",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = relu_module

    def forward(self, x):
        return self.relu.relu_forward(x)
