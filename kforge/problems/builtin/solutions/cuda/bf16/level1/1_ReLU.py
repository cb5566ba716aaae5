import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# bf16 ReLU: 16-byte loads and stores (8 values), two per thread, the comparison in fp32 (exact).
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

// One pass, no grid-stride loop: each thread takes two 16-byte vectors a block apart and issues both loads before
// either store. On an H100 at 4096 x 98304 this runs level with eager (0.998x; both move the 1.6 GB at about
// 3 TB/s); one vector per iteration of a grid-stride loop over 132 * 16 blocks ran 0.94x (too few loads in flight).
constexpr int THREADS = 128, PER_THREAD = 2;

__global__ void __launch_bounds__(THREADS) relu_vec_kernel(const bf16* __restrict__ x, bf16* __restrict__ y,
                                                           int64_t n8) {
    const int64_t base = (int64_t)blockIdx.x * THREADS * PER_THREAD + threadIdx.x;
    float f[PER_THREAD][8];
    #pragma unroll
    for (int u = 0; u < PER_THREAD; ++u)
        if (base + u * THREADS < n8) load8(x + 8 * (base + u * THREADS), f[u]);
    #pragma unroll
    for (int u = 0; u < PER_THREAD; ++u) {
        if (base + u * THREADS >= n8) continue;
        #pragma unroll
        for (int k = 0; k < 8; ++k) f[u][k] = f[u][k] > 0.f ? f[u][k] : 0.f;
        store8(y + 8 * (base + u * THREADS), f[u]);
    }
}

// elements from..n one at a time: the tail after the vectors, or everything when the pointers are unaligned
__global__ void relu_scalar_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, int64_t from, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = from + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = __bfloat162float(x[i]);
        y[i] = __float2bfloat16(v > 0.f ? v : 0.f);
    }
}

const char* relu_launch(const void* x, void* y, int64_t n) {
    if (n == 0) return nullptr;
    const bf16* xb = static_cast<const bf16*>(x);
    bf16* yb = static_cast<bf16*>(y);
    const int64_t n8 = aligned16(x) && aligned16(y) ? n / 8 : 0;
    const int64_t vec_blocks = (n8 + THREADS * PER_THREAD - 1) / (THREADS * PER_THREAD);
    if (n8 > 0) relu_vec_kernel<<<(unsigned)vec_blocks, THREADS>>>(xb, yb, n8);
    if (8 * n8 < n) {
        const int blocks = (int)std::min<int64_t>((n - 8 * n8 + 255) / 256, 132 * 16);
        relu_scalar_kernel<<<blocks, 256>>>(xb, yb, 8 * n8, n);
    }
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
