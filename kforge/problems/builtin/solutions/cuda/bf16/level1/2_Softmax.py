import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# bf16 softmax over the last dimension: one block per row, fp32 arithmetic. Pass 1 reads the row once
# (16-byte loads), keeping an online (max, sum of exp) per thread, merged over the block, and keeps the first
# part of the row (raw bf16, up to 96 KB) in shared memory; pass 2 writes exp(x - max) / sum, taking the cached
# part from shared memory and re-reading the rest back to front (the part most likely still in L2).
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

// (m, s) summarises exponentials: sum_i exp(x_i) = s * exp(m). Merge two summaries.
__device__ __forceinline__ void ms_merge(float& m, float& s, float m2, float s2) {
    const float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return;  // both empty
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

__device__ __forceinline__ void ms_add(float& m, float& s, float v) {
    if (v > m) { s *= expf(m - v); m = v; }
    s += expf(v - m);
}

__global__ void softmax_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, int64_t D, int64_t C8, bool vec) {
    extern __shared__ uint4 cache8[];  // C8 chunks of 8 bf16
    __shared__ float red_m[32], red_s[32];
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const bf16* xr = x + (int64_t)blockIdx.x * D;
    bf16* yr = y + (int64_t)blockIdx.x * D;
    const int64_t D8 = vec ? D / 8 : 0;  // 8-wide body, then a scalar tail (all of it when !vec)

    float m = -INFINITY, s = 0.f;
    for (int64_t i = tid; i < D8; i += nt) {
        const uint4 u = reinterpret_cast<const uint4*>(xr)[i];
        if (i < C8) cache8[i] = u;
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
        float f[8];
        #pragma unroll
        for (int k = 0; k < 4; ++k) { const float2 t = __bfloat1622float2(h[k]); f[2 * k] = t.x; f[2 * k + 1] = t.y; }
        float mx = f[0];
        #pragma unroll
        for (int k = 1; k < 8; ++k) mx = fmaxf(mx, f[k]);
        if (mx > m) { s *= expf(m - mx); m = mx; }
        #pragma unroll
        for (int k = 0; k < 8; ++k) s += expf(f[k] - m);
    }
    for (int64_t i = 8 * D8 + tid; i < D; i += nt) ms_add(m, s, __bfloat162float(xr[i]));

    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();  // also makes the cache visible (pass 2 reads it with another index mapping)
    m = lane < (nt >> 5) ? red_m[lane] : -INFINITY;
    s = lane < (nt >> 5) ? red_s[lane] : 0.f;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    const float row_max = m, inv = 1.f / s;

    for (int64_t i = 8 * D8 + tid; i < D; i += nt)
        yr[i] = __float2bfloat16(expf(__bfloat162float(xr[i]) - row_max) * inv);
    for (int64_t i = D8 - 1 - tid; i >= 0; i -= nt) {
        const uint4 u = i < C8 ? cache8[i] : reinterpret_cast<const uint4*>(xr)[i];
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
        float f[8];
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float2 t = __bfloat1622float2(h[k]);
            f[2 * k] = expf(t.x - row_max) * inv;
            f[2 * k + 1] = expf(t.y - row_max) * inv;
        }
        store8(yr + 8 * i, f);
    }
}

const char* softmax_launch(const void* x, void* y, int64_t rows, int64_t D) {
    if (rows == 0 || D == 0) return nullptr;
    const bool vec = D % 8 == 0 && aligned16(x) && aligned16(y);
    const int threads = D >= 16384 ? 1024 : (D >= 2048 ? 256 : 128);
    const int64_t C8 = vec ? std::min<int64_t>(D / 8, 96 * 1024 / 16) : 0;  // up to 96 KB of the row
    const size_t smem = (size_t)C8 * 16;
    if (smem > 0) {
        const cudaError_t err = cudaFuncSetAttribute(softmax_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)smem);
        if (err != cudaSuccess) return cudaGetErrorString(err);
    }
    softmax_kernel<<<(unsigned)rows, threads, smem>>>(static_cast<const bf16*>(x), static_cast<bf16*>(y), D, C8, vec);
    return launch_status();
}
"""

cpp_source = r"""
static void check_bf16_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kBFloat16, name, " must be bfloat16 (this is the bf16 solution), got ",
                t.scalar_type());
}

const char* softmax_launch(const void* x, void* y, int64_t rows, int64_t D);

torch::Tensor softmax_forward(torch::Tensor x) {
    check_bf16_cuda(x, "x");
    TORCH_CHECK(x.dim() >= 1, "x must have a last dimension");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t D = xc.size(-1);
    const char* err = softmax_launch(xc.data_ptr(), out.data_ptr(), D ? xc.numel() / D : 0, D);
    TORCH_CHECK(err == nullptr, "softmax kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_softmax_bf16", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["softmax_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.softmax_forward(x)
