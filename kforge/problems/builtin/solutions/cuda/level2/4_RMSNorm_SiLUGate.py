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

__device__ __forceinline__ float silu(float g) { return g / (1.f + expf(-g)); }

// One block per row: x cached in shared memory when it fits (read once), mean of squares reduced
// over the block, then out = x * rsqrt(mean + eps) * weight * silu(g), g read once.
__global__ void rmsnorm_silu_gate_kernel(const float* __restrict__ x, const float* __restrict__ g,
                                         const float* __restrict__ w, float* __restrict__ out,
                                         int64_t D, float eps, bool vec, bool cache) {
    extern __shared__ float4 row_cache4[];
    __shared__ float red[32];
    float* row_cache = reinterpret_cast<float*>(row_cache4);
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t off = (int64_t)blockIdx.x * D;
    const float *xr = x + off, *gr = g + off;
    float* orow = out + off;
    const int64_t D4 = vec ? D / 4 : 0;
    const float4* xr4 = reinterpret_cast<const float4*>(xr);

    float q = 0.f;
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 v = xr4[i];
        if (cache) row_cache4[i] = v;
        q += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) {
        const float v = xr[i];
        if (cache) row_cache[i] = v;
        q += v * v;
    }
    const float rstd = 1.f / sqrtf(block_sum(q, red) / (float)D + eps);

    const float* src = cache ? row_cache : xr;  // each thread re-reads what it wrote
    const float4* src4 = reinterpret_cast<const float4*>(src);
    const float4* g4 = reinterpret_cast<const float4*>(gr);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4* o4 = reinterpret_cast<float4*>(orow);
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 v = src4[i], gg = g4[i], ww = w4[i];
        o4[i] = make_float4(v.x * rstd * ww.x * silu(gg.x), v.y * rstd * ww.y * silu(gg.y),
                            v.z * rstd * ww.z * silu(gg.z), v.w * rstd * ww.w * silu(gg.w));
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) orow[i] = src[i] * rstd * w[i] * silu(gr[i]);
}

const char* rmsnorm_silu_gate_launch(const float* x, const float* g, const float* w, float* out, int64_t rows,
                                     int64_t D, float eps) {
    if (rows == 0 || D == 0) return nullptr;
    const bool vec = D % 4 == 0 && aligned16(x) && aligned16(g) && aligned16(w) && aligned16(out);
    const bool cache = D * (int64_t)sizeof(float) <= MAX_CACHED_BYTES;
    const int threads = D >= 16384 ? 1024 : (D >= 2048 ? 256 : 128);
    rmsnorm_silu_gate_kernel<<<(unsigned)rows, threads, cache ? D * sizeof(float) : 0>>>(x, g, w, out, D, eps,
                                                                                         vec, cache);
    return launch_status();
}
"""

cpp_source = r"""
static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* rmsnorm_silu_gate_launch(const float* x, const float* g, const float* w, float* out, int64_t rows,
                                     int64_t D, float eps);

torch::Tensor rmsnorm_silu_gate_forward(torch::Tensor x, torch::Tensor g, torch::Tensor weight, double eps) {
    check_f32_cuda(x, "x");
    check_f32_cuda(g, "g");
    check_f32_cuda(weight, "weight");
    TORCH_CHECK(x.sizes() == g.sizes(), "x and g must have the same shape");
    const int64_t D = x.size(-1);
    TORCH_CHECK(D > 0 && weight.numel() == D, "weight size mismatch");
    auto xc = x.contiguous();
    auto gc = g.contiguous();
    auto wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    const char* err = rmsnorm_silu_gate_launch(xc.data_ptr<float>(), gc.data_ptr<float>(), wc.data_ptr<float>(),
                                               out.data_ptr<float>(), xc.numel() / D, D, (float)eps);
    TORCH_CHECK(err == nullptr, "rmsnorm kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_rmsnorm_silu_gate", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["rmsnorm_silu_gate_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x, g):
        return _ext.rmsnorm_silu_gate_forward(x, g, self.weight, self.eps)
