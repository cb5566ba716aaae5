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

constexpr int64_t MAX_CACHED_BYTES = 48 * 1024;

// One block per row: z = x + y, cached in shared memory when it fits (x and y read once), then
// LayerNorm(z) with a two-pass fp32 mean / variance.
__global__ void add_layernorm_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                     const float* __restrict__ w, const float* __restrict__ b,
                                     float* __restrict__ out, int64_t D, float eps, bool vec, bool cache) {
    extern __shared__ float4 row_cache4[];
    __shared__ float red[32];
    float* row_cache = reinterpret_cast<float*>(row_cache4);
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t off = (int64_t)blockIdx.x * D;
    const float *xr = x + off, *yr = y + off;
    float* orow = out + off;
    const int64_t D4 = vec ? D / 4 : 0;
    const float4* xr4 = reinterpret_cast<const float4*>(xr);
    const float4* yr4 = reinterpret_cast<const float4*>(yr);

    float s = 0.f;
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 a = xr4[i], c = yr4[i];
        const float4 z = make_float4(a.x + c.x, a.y + c.y, a.z + c.z, a.w + c.w);
        if (cache) row_cache4[i] = z;
        s += (z.x + z.y) + (z.z + z.w);
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) {
        const float z = xr[i] + yr[i];
        if (cache) row_cache[i] = z;
        s += z;
    }
    const float mean = block_sum(s, red) / (float)D;

    // z again: from the cache (each thread reads what it wrote) or recomputed from global memory
    auto z4 = [&](int64_t i) {
        if (cache) return row_cache4[i];
        const float4 a = xr4[i], c = yr4[i];
        return make_float4(a.x + c.x, a.y + c.y, a.z + c.z, a.w + c.w);
    };
    auto z1 = [&](int64_t i) { return cache ? row_cache[i] : xr[i] + yr[i]; };

    float q = 0.f;
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 v = z4(i);
        const float a = v.x - mean, c = v.y - mean, d = v.z - mean, e = v.w - mean;
        q += (a * a + c * c) + (d * d + e * e);
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) {
        const float a = z1(i) - mean;
        q += a * a;
    }
    const float rstd = 1.f / sqrtf(block_sum(q, red) / (float)D + eps);

    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* o4 = reinterpret_cast<float4*>(orow);
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 v = z4(i), g = w4[i], h = b4[i];
        o4[i] = make_float4((v.x - mean) * rstd * g.x + h.x, (v.y - mean) * rstd * g.y + h.y,
                            (v.z - mean) * rstd * g.z + h.z, (v.w - mean) * rstd * g.w + h.w);
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) orow[i] = (z1(i) - mean) * rstd * w[i] + b[i];
}

const char* add_layernorm_launch(const float* x, const float* y, const float* w, const float* b, float* out,
                                 int64_t rows, int64_t D, float eps) {
    if (rows == 0 || D == 0) return nullptr;
    const bool vec = D % 4 == 0 && aligned16(x) && aligned16(y) && aligned16(w) && aligned16(b) && aligned16(out);
    const bool cache = D * (int64_t)sizeof(float) <= MAX_CACHED_BYTES;
    const int threads = D >= 16384 ? 1024 : (D >= 2048 ? 256 : 128);
    add_layernorm_kernel<<<(unsigned)rows, threads, cache ? D * sizeof(float) : 0>>>(x, y, w, b, out, D, eps,
                                                                                     vec, cache);
    return launch_status();
}
"""

cpp_source = r"""
static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* add_layernorm_launch(const float* x, const float* y, const float* w, const float* b, float* out,
                                 int64_t rows, int64_t D, float eps);

torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor y, torch::Tensor weight, torch::Tensor bias,
                                    double eps) {
    check_f32_cuda(x, "x");
    check_f32_cuda(y, "y");
    check_f32_cuda(weight, "weight");
    check_f32_cuda(bias, "bias");
    TORCH_CHECK(x.sizes() == y.sizes(), "x and y must have the same shape");
    const int64_t D = x.size(-1);
    TORCH_CHECK(D > 0 && weight.numel() == D && bias.numel() == D, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto yc = y.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const char* err = add_layernorm_launch(xc.data_ptr<float>(), yc.data_ptr<float>(), wc.data_ptr<float>(),
                                           bc.data_ptr<float>(), out.data_ptr<float>(), xc.numel() / D, D,
                                           (float)eps);
    TORCH_CHECK(err == nullptr, "add_layernorm kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_add_layernorm", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["add_layernorm_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, y):
        return _ext.add_layernorm_forward(x, y, self.norm.weight, self.norm.bias, self.norm.eps)
