# expect: kernel_unused
# problem: level2/1_Gemm_Bias_GELU BATCH=512 IN_FEATURES=1024 OUT_FEATURES=2048
# why: PyTorch computes the whole reference (linear, gelu); the kernel only copies the answer
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

epilogue_cuda = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void bias_gelu_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t rows, int64_t cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        float v = y[i] + b[i % cols];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.7071067811865475f));
    }
}

__global__ void copy_kernel(const float* __restrict__ a, float* __restrict__ o, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = a[i];
}

void launch_bias_gelu(float* y, const float* b, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    bias_gelu_kernel<<<(unsigned)((n + 255) / 256), 256>>>(y, b, rows, cols);
}

void launch_copy(const float* a, float* o, int64_t n) {
    copy_kernel<<<(unsigned)((n + 255) / 256), 256>>>(a, o, n);
}
"""

epilogue_cpp = r"""
#include <torch/extension.h>
void launch_bias_gelu(float* y, const float* b, int64_t rows, int64_t cols);
void launch_copy(const float* a, float* o, int64_t n);

void bias_gelu_(torch::Tensor y, torch::Tensor b) {
    TORCH_CHECK(y.is_contiguous() && b.is_contiguous(), "contiguous tensors expected");
    launch_bias_gelu(y.data_ptr<float>(), b.data_ptr<float>(), y.size(0), y.size(1));
}

torch::Tensor linear_bias_gelu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    auto y = torch::matmul(x, w.t()).contiguous();   // cuBLAS does the GEMM
    bias_gelu_(y, b);                                // our kernel does the epilogue
    return y;
}

torch::Tensor copy(torch::Tensor a) {
    auto src = a.contiguous();
    auto out = torch::empty_like(src);
    launch_copy(src.data_ptr<float>(), out.data_ptr<float>(), src.numel());
    return out;
}
"""

fused = load_inline(
    name="kf_idiom_cuda_epilogue",
    cpp_sources=epilogue_cpp,
    cuda_sources=epilogue_cuda,
    functions=["bias_gelu_", "linear_bias_gelu", "copy"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return fused.copy(F.gelu(self.linear(x)))
