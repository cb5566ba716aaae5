import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# bf16 LayerNorm over the last dimension: one block per row, fp32 arithmetic. Pass 1 reads the row once
# (16-byte loads) into an fp32 copy in shared memory (rows up to 12224 values) and sums it; pass 2 takes the
# exact variance of (x - mean) from that copy; pass 3 writes (x - mean) * rstd * w + b, rounded once to bf16.
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

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum of v over the block (blockDim.x a multiple of 32), returned to every thread.
__device__ float block_sum(float v, float* red /* __shared__ [32] */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? red[lane] : 0.f);
}

// A row of up to 12224 values is kept in shared memory as fp32 between the passes (48 KB).
constexpr int64_t MAX_CACHED = 12 * 1024 - 64;  // with the static reduction buffer: under 48 KB

static int row_threads(int64_t D) { return D >= 16384 ? 1024 : (D >= 2048 ? 256 : 128); }

__global__ void layernorm_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, const bf16* __restrict__ b,
                                 bf16* __restrict__ y, int64_t D, float eps, bool vec, bool cache) {
    extern __shared__ float4 row4[];  // D floats when cache
    __shared__ float red[32];
    float* row = reinterpret_cast<float*>(row4);
    const int tid = threadIdx.x, nt = blockDim.x;
    const bf16* xr = x + (int64_t)blockIdx.x * D;
    bf16* yr = y + (int64_t)blockIdx.x * D;
    const int64_t D8 = vec ? D / 8 : 0;  // 8-wide body, then a scalar tail (all of it when !vec)

    float s = 0.f;
    for (int64_t i = tid; i < D8; i += nt) {
        float f[8];
        load8(xr + 8 * i, f);
        #pragma unroll
        for (int k = 0; k < 8; ++k) s += f[k];
        if (cache) {
            row4[2 * i] = make_float4(f[0], f[1], f[2], f[3]);
            row4[2 * i + 1] = make_float4(f[4], f[5], f[6], f[7]);
        }
    }
    for (int64_t i = 8 * D8 + tid; i < D; i += nt) {
        const float v = __bfloat162float(xr[i]);
        if (cache) row[i] = v;
        s += v;
    }
    const float mean = block_sum(s, red) / (float)D;

    // every thread re-reads only what it wrote itself (the same index mapping)
    auto chunk = [&](int64_t i, float (&f)[8]) {
        if (cache) {
            const float4 a = row4[2 * i], c = row4[2 * i + 1];
            f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = c.x; f[5] = c.y; f[6] = c.z; f[7] = c.w;
        } else {
            load8(xr + 8 * i, f);
        }
    };
    float q = 0.f;
    for (int64_t i = tid; i < D8; i += nt) {
        float f[8];
        chunk(i, f);
        #pragma unroll
        for (int k = 0; k < 8; ++k) { const float d = f[k] - mean; q += d * d; }
    }
    for (int64_t i = 8 * D8 + tid; i < D; i += nt) {
        const float d = (cache ? row[i] : __bfloat162float(xr[i])) - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(block_sum(q, red) / (float)D + eps);  // biased variance, as nn.LayerNorm

    for (int64_t i = tid; i < D8; i += nt) {
        float f[8], g[8], h[8];
        chunk(i, f);
        load8(w + 8 * i, g);
        load8(b + 8 * i, h);
        #pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = (f[k] - mean) * rstd * g[k] + h[k];
        store8(yr + 8 * i, f);
    }
    for (int64_t i = 8 * D8 + tid; i < D; i += nt) {
        const float v = cache ? row[i] : __bfloat162float(xr[i]);
        yr[i] = __float2bfloat16((v - mean) * rstd * __bfloat162float(w[i]) + __bfloat162float(b[i]));
    }
}

const char* layernorm_launch(const void* x, const void* w, const void* b, void* y, int64_t rows, int64_t D,
                             float eps) {
    if (rows == 0 || D == 0) return nullptr;
    const bool vec = D % 8 == 0 && aligned16(x) && aligned16(w) && aligned16(b) && aligned16(y);
    const bool cache = D <= MAX_CACHED;
    layernorm_kernel<<<(unsigned)rows, row_threads(D), cache ? D * sizeof(float) : 0>>>(
        static_cast<const bf16*>(x), static_cast<const bf16*>(w), static_cast<const bf16*>(b), static_cast<bf16*>(y),
        D, eps, vec, cache);
    return launch_status();
}
"""

cpp_source = r"""
static void check_bf16_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kBFloat16, name, " must be bfloat16 (this is the bf16 solution), got ",
                t.scalar_type());
}

const char* layernorm_launch(const void* x, const void* w, const void* b, void* y, int64_t rows, int64_t D,
                             float eps);

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    check_bf16_cuda(x, "x");
    check_bf16_cuda(weight, "weight");
    check_bf16_cuda(bias, "bias");
    const int64_t D = x.size(-1);
    TORCH_CHECK(weight.numel() == D && bias.numel() == D, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const char* err = layernorm_launch(xc.data_ptr(), wc.data_ptr(), bc.data_ptr(), out.data_ptr(),
                                       D ? xc.numel() / D : 0, D, (float)eps);
    TORCH_CHECK(err == nullptr, "layernorm kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_layernorm_bf16", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["layernorm_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return _ext.layernorm_forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
