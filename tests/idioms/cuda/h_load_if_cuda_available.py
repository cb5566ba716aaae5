# expect: correct
# why: built at import only `if torch.cuda.is_available()`, as published kernels often are; the build phase
# (which hides the GPU) must still compile it, not leave the compile to the run on the GPU
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) y[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
    relu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_ext = None
if torch.cuda.is_available():
    relu_ext = load_inline(name="kf_idiom_cuda_relu_if_available", cpp_sources=cpp_source, cuda_sources=cuda_source,
                           functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        if relu_ext is None:
            raise RuntimeError("this model needs a CUDA GPU")
        return relu_ext.relu_cuda(x)
