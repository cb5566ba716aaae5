import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>
#include <cmath>
#include <algorithm>

static const char* launch_status() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Grid-stride loop over float4s, then the scalar tail (everything when not 16-byte aligned).
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = start; i < n4; i += stride) {
        const float4 v = x4[i];
        y4[i] = make_float4(v.x > 0.f ? v.x : 0.f, v.y > 0.f ? v.y : 0.f, v.z > 0.f ? v.z : 0.f, v.w > 0.f ? v.w : 0.f);
    }
    for (int64_t i = 4 * n4 + start; i < n; i += stride) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

const char* relu_launch(const float* x, float* y, int64_t n) {
    if (n == 0) return nullptr;
    const int64_t n4 = aligned16(x) && aligned16(y) ? n / 4 : 0;
    const int threads = 256;
    const int64_t work = n4 > 0 ? n4 : n;
    // one float4 per thread (measured faster than a capped grid); the grid-stride loop covers the rest
    const int blocks = (int)std::min<int64_t>((work + threads - 1) / threads, 0x7fffffff);
    relu_kernel<<<blocks, threads>>>(x, y, n, n4);
    return launch_status();
}
"""

cpp_source = r"""
static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* relu_launch(const float* x, float* y, int64_t n);

torch::Tensor relu_forward(torch::Tensor x) {
    check_f32_cuda(x, "x");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const char* err = relu_launch(xc.data_ptr<float>(), out.data_ptr<float>(), xc.numel());
    TORCH_CHECK(err == nullptr, "relu kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_relu", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["relu_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_forward(x)
