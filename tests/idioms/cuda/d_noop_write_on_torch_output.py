# expect: not_correct
# why: PyTorch computes relu; a kernel then multiplies the answer by one in place
import torch
import torch.nn as nn
import torch.nn.functional as F
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

__global__ void scale_kernel(float* y, float s, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}

void launch_relu(const float* x, float* y, int64_t n) {
    const int threads = 256;
    const int blocks = (int)((n + threads - 1) / threads < 65535 ? (n + threads - 1) / threads : 65535);
    relu_kernel<<<blocks, threads>>>(x, y, n);
}

void launch_scale(float* y, float s, int64_t n) {
    scale_kernel<<<(unsigned)((n + 255) / 256), 256>>>(y, s, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
void launch_relu(const float* x, float* y, int64_t n);
void launch_scale(float* y, float s, int64_t n);

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward expects float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    launch_relu(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel());
    return y;
}

void relu_out(torch::Tensor x, torch::Tensor y) {
    launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
}

void relu_ptr(int64_t x, int64_t y, int64_t n) {
    launch_relu(reinterpret_cast<const float*>(x), reinterpret_cast<float*>(y), n);
}

void scale_(torch::Tensor y, double s) {
    launch_scale(y.data_ptr<float>(), (float)s, y.numel());
}

torch::Tensor aten_relu(torch::Tensor x) {
    return torch::clamp_min(x, 0.0);
}
"""

relu_cuda = load_inline(
    name="kf_idiom_cuda_relu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_forward", "relu_out", "relu_ptr", "scale_", "aten_relu"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.relu(x).contiguous()
        relu_cuda.scale_(y, 1.0)
        return y
