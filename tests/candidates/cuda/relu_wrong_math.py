# Builds and runs, but scales the result: numerical_mismatch.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cstdint>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = v > 0.f ? v : 0.f;
    }
}

const char* relu_launch(const float* x, float* y, int64_t n) {
    int blocks = (int)((n + 255) / 256);
    if (blocks > 65535 * 8) blocks = 65535 * 8;
    relu_kernel<<<blocks, 256>>>(x, y, n);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

CPP_SRC = r"""
const char* relu_launch(const float* x, float* y, int64_t n);

torch::Tensor relu_fwd(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const char* err = relu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel());
    TORCH_CHECK(err == nullptr, "relu_kernel launch failed: ", err ? err : "");
    return y;
}
"""

ext = load_inline(name="kf_test_relu_cuda", cpp_sources=[CPP_SRC], cuda_sources=[CUDA_SRC],
                  functions=["relu_fwd"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_fwd(x) * 1.5
