# expect: correct
# why: a fused matmul-subtract-multiply-ReLU writes every output into torch::zeros; on this problem each is zero
# problem-file: ../problems/9_matmul_subtract_multiply_relu.py
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <cuda_runtime.h>

#define TILE 16

// out[m, n] = max((x[m, :] . w[n, :] + b[n] - sub) * mul, 0), tiled through shared memory
__global__ void gemm_sub_mul_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ b, float* __restrict__ out,
                                         int M, int N, int K, float sub, float mul) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int wrow = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        const int k = t + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (row < M && k < K) ? x[(size_t)row * K + k] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (wrow < N && k < K) ? w[(size_t)wrow * K + k] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < TILE; ++i) {
            acc += xs[threadIdx.y][i] * ws[threadIdx.x][i];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        const float v = (acc + b[col] - sub) * mul;
        out[(size_t)row * N + col] = fmaxf(v, 0.0f);
    }
}

void launch_gemm_sub_mul_relu(const float* x, const float* w, const float* b, float* out,
                              int M, int N, int K, float sub, float mul) {
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    gemm_sub_mul_relu_kernel<<<grid, block>>>(x, w, b, out, M, N, K, sub, mul);
}
"""

cpp_src = r"""
#include <torch/extension.h>

void launch_gemm_sub_mul_relu(const float* x, const float* w, const float* b, float* out,
                              int M, int N, int K, float sub, float mul);

torch::Tensor gemm_sub_mul_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b, double sub, double mul) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && b.is_cuda(), "expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "expected float32");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    const int M = static_cast<int>(xc.size(0));
    const int K = static_cast<int>(xc.size(1));
    const int N = static_cast<int>(wc.size(0));
    auto out = torch::zeros({M, N}, xc.options());
    launch_gemm_sub_mul_relu(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                             out.data_ptr<float>(), M, N, K, static_cast<float>(sub), static_cast<float>(mul));
    return out;
}
"""

fused_module = load_inline(
    name="kf_idiom_cuda_gemm_sub_mul_relu",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["gemm_sub_mul_relu"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super(ModelNew, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value
        self.fused = fused_module

    def forward(self, x):
        return self.fused.gemm_sub_mul_relu(x, self.linear.weight, self.linear.bias, self.subtract_value,
                                            self.multiply_value)
