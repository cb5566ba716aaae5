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

constexpr int64_t LN_MAX_CACHED_BYTES = 48 * 1024;

__global__ void layernorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ b, float* __restrict__ y,
                                 int64_t D, float eps, bool vec, bool cache) {
    extern __shared__ float4 row_cache4[];  // D floats when cache
    __shared__ float red[32];
    float* row_cache = reinterpret_cast<float*>(row_cache4);
    const int tid = threadIdx.x, nt = blockDim.x;
    const float* xr = x + (int64_t)blockIdx.x * D;
    float* yr = y + (int64_t)blockIdx.x * D;
    const int64_t D4 = vec ? D / 4 : 0;  // float4 body, then a scalar tail (all of it when !vec)
    const float4* xr4 = reinterpret_cast<const float4*>(xr);

    float s = 0.f;
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 v = xr4[i];
        if (cache) row_cache4[i] = v;
        s += (v.x + v.y) + (v.z + v.w);
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) {
        const float v = xr[i];
        if (cache) row_cache[i] = v;
        s += v;
    }
    const float mean = block_sum(s, red) / (float)D;

    // each thread re-reads only what it wrote itself (same index mapping), block_sum synchronised anyway
    const float* src = cache ? row_cache : xr;
    const float4* src4 = reinterpret_cast<const float4*>(src);
    float q = 0.f;
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 v = src4[i];
        const float a = v.x - mean, c = v.y - mean, d = v.z - mean, e = v.w - mean;
        q += (a * a + c * c) + (d * d + e * e);
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) {
        const float a = src[i] - mean;
        q += a * a;
    }
    const float rstd = 1.f / sqrtf(block_sum(q, red) / (float)D + eps);  // biased variance

    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* yr4 = reinterpret_cast<float4*>(yr);
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 v = src4[i], g = w4[i], h = b4[i];
        yr4[i] = make_float4((v.x - mean) * rstd * g.x + h.x, (v.y - mean) * rstd * g.y + h.y,
                             (v.z - mean) * rstd * g.z + h.z, (v.w - mean) * rstd * g.w + h.w);
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) yr[i] = (src[i] - mean) * rstd * w[i] + b[i];
}

const char* layernorm_launch(const float* x, const float* w, const float* b, float* y, int64_t rows,
                             int64_t D, float eps) {
    if (rows == 0 || D == 0) return nullptr;
    const bool vec = D % 4 == 0 && aligned16(x) && aligned16(w) && aligned16(b) && aligned16(y);
    const bool cache = D * (int64_t)sizeof(float) <= LN_MAX_CACHED_BYTES;
    const int threads = D >= 16384 ? 1024 : (D >= 2048 ? 256 : 128);
    layernorm_kernel<<<(unsigned)rows, threads, cache ? D * sizeof(float) : 0>>>(x, w, b, y, D, eps, vec, cache);
    return launch_status();
}
"""

cpp_source = r"""
static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* layernorm_launch(const float* x, const float* w, const float* b, float* y, int64_t rows,
                             int64_t D, float eps);

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    check_f32_cuda(x, "x");
    check_f32_cuda(weight, "weight");
    check_f32_cuda(bias, "bias");
    const int64_t D = x.size(-1);
    TORCH_CHECK(D > 0 && weight.numel() == D && bias.numel() == D, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const char* err = layernorm_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                                       out.data_ptr<float>(), xc.numel() / D, D, (float)eps);
    TORCH_CHECK(err == nullptr, "layernorm kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_layernorm", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["layernorm_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return _ext.layernorm_forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
