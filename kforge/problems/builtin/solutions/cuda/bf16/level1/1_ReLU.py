import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# bf16 ReLU: 16-byte loads and stores (8 values), the comparison in fp32 (exact), grid-stride loop.
cuda_source = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cmath>
#include <algorithm>

typedef __nv_bfloat16 bf16;

static const char* launch_status() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// 8 bf16 <-> 8 floats through one 16-byte access (p 16-byte aligned)
__device__ __forceinline__ void load8(const bf16* p, float (&f)[8]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 t = __bfloat1622float2(h[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

__device__ __forceinline__ void store8(bf16* p, const float (&f)[8]) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
    #pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    *reinterpret_cast<uint4*>(p) = u;
}

__global__ void relu_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, int64_t n, int64_t n8) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t i = start; i < n8; i += stride) {
        float f[8];
        load8(x + 8 * i, f);
        #pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = f[k] > 0.f ? f[k] : 0.f;
        store8(y + 8 * i, f);
    }
    for (int64_t i = 8 * n8 + start; i < n; i += stride) {  // tail (all of it when unaligned)
        const float v = __bfloat162float(x[i]);
        y[i] = __float2bfloat16(v > 0.f ? v : 0.f);
    }
}

const char* relu_launch(const void* x, void* y, int64_t n) {
    if (n == 0) return nullptr;
    const int64_t n8 = aligned16(x) && aligned16(y) ? n / 8 : 0;
    const int threads = 256;
    const int64_t work = n8 > 0 ? n8 : n;
    const int blocks = (int)std::min<int64_t>((work + threads - 1) / threads, 132 * 16);
    relu_kernel<<<blocks, threads>>>(static_cast<const bf16*>(x), static_cast<bf16*>(y), n, n8);
    return launch_status();
}
"""

cpp_source = r"""
static void check_bf16_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kBFloat16, name, " must be bfloat16 (this is the bf16 solution), got ",
                t.scalar_type());
}

const char* relu_launch(const void* x, void* y, int64_t n);

torch::Tensor relu_forward(torch::Tensor x) {
    check_bf16_cuda(x, "x");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const char* err = relu_launch(xc.data_ptr(), out.data_ptr(), xc.numel());
    TORCH_CHECK(err == nullptr, "relu kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_relu_bf16", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["relu_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_forward(x)
