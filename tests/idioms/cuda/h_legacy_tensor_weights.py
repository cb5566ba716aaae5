# expect: correct
# problem: level2/1_Gemm_Bias_GELU BATCH=512 IN_FEATURES=1024 OUT_FEATURES=2048
# why: keeps its weights as its own parameters (other names than the reference's nn.Linear, so none are copied
#   over), made with the legacy torch.Tensor(...) constructor and initialised as nn.Linear initialises; the
#   same draws as the reference only when both models are built the way KernelBench builds them (on the CPU)
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void bias_gelu_rows_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t rows,
                                      int64_t cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < rows * cols; i += stride) {
        float v = y[i] + b[i % cols];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.7071067811865475f));
    }
}

void launch_bias_gelu_rows(float* y, const float* b, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    int blocks = (int)((n + 255) / 256 < 8192 ? (n + 255) / 256 : 8192);
    bias_gelu_rows_kernel<<<blocks, 256>>>(y, b, rows, cols);
}
"""

cpp_source = r"""
#include <torch/extension.h>
void launch_bias_gelu_rows(float* y, const float* b, int64_t rows, int64_t cols);

torch::Tensor gemm_bias_gelu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && b.is_cuda(), "CUDA tensors expected");
    auto y = torch::mm(x.contiguous(), w.t()).contiguous();  // cuBLAS for the GEMM
    launch_bias_gelu_rows(y.data_ptr<float>(), b.contiguous().data_ptr<float>(), y.size(0), y.size(1));
    return y;
}
"""

ops = load_inline(name="kf_idiom_legacy_weights", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["gemm_bias_gelu"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.bias = nn.Parameter(torch.Tensor(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # what nn.Linear does
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return ops.gemm_bias_gelu(x, self.weight, self.bias)
