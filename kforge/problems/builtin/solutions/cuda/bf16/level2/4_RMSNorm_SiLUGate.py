import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# bf16 gated RMSNorm, x * rsqrt(mean(x^2) + eps) * weight * silu(g) over the last dimension: one block per row,
# fp32 arithmetic. Pass 1 reads x once (16-byte loads) into an fp32 copy in shared memory (rows up to 12288
# values) and sums its squares; pass 2 reads g and the weight and writes, rounded once to bf16.
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

__device__ __forceinline__ float silu(float v) { return v / (1.f + __expf(-v)); }  // exp overflow: -0, the limit

__global__ void rmsnorm_silu_gate_kernel(const bf16* __restrict__ x, const bf16* __restrict__ g,
                                         const bf16* __restrict__ w, bf16* __restrict__ y, int64_t D, float eps,
                                         bool vec, bool cache) {
    extern __shared__ float4 row4[];  // D floats when cache
    __shared__ float red[32];
    float* row = reinterpret_cast<float*>(row4);
    const int tid = threadIdx.x, nt = blockDim.x;
    const bf16* xr = x + (int64_t)blockIdx.x * D;
    const bf16* gr = g + (int64_t)blockIdx.x * D;
    bf16* yr = y + (int64_t)blockIdx.x * D;
    const int64_t D8 = vec ? D / 8 : 0;

    float ss = 0.f;
    for (int64_t i = tid; i < D8; i += nt) {
        float f[8];
        load8(xr + 8 * i, f);
        #pragma unroll
        for (int k = 0; k < 8; ++k) ss += f[k] * f[k];
        if (cache) {
            row4[2 * i] = make_float4(f[0], f[1], f[2], f[3]);
            row4[2 * i + 1] = make_float4(f[4], f[5], f[6], f[7]);
        }
    }
    for (int64_t i = 8 * D8 + tid; i < D; i += nt) {
        const float v = __bfloat162float(xr[i]);
        if (cache) row[i] = v;
        ss += v * v;
    }
    const float rms = rsqrtf(block_sum(ss, red) / (float)D + eps);

    for (int64_t i = tid; i < D8; i += nt) {  // the same index mapping: each thread reads its own writes
        float f[8], gv[8], wv[8];
        if (cache) {
            const float4 a = row4[2 * i], c = row4[2 * i + 1];
            f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = c.x; f[5] = c.y; f[6] = c.z; f[7] = c.w;
        } else {
            load8(xr + 8 * i, f);
        }
        load8(gr + 8 * i, gv);
        load8(w + 8 * i, wv);
        #pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = f[k] * rms * wv[k] * silu(gv[k]);
        store8(yr + 8 * i, f);
    }
    for (int64_t i = 8 * D8 + tid; i < D; i += nt) {
        const float v = cache ? row[i] : __bfloat162float(xr[i]);
        yr[i] = __float2bfloat16(v * rms * __bfloat162float(w[i]) * silu(__bfloat162float(gr[i])));
    }
}

const char* rmsnorm_silu_gate_launch(const void* x, const void* g, const void* w, void* y, int64_t rows, int64_t D,
                                     float eps) {
    if (rows == 0 || D == 0) return nullptr;
    const bool vec = D % 8 == 0 && aligned16(x) && aligned16(g) && aligned16(w) && aligned16(y);
    const bool cache = D <= MAX_CACHED;
    rmsnorm_silu_gate_kernel<<<(unsigned)rows, row_threads(D), cache ? D * sizeof(float) : 0>>>(
        static_cast<const bf16*>(x), static_cast<const bf16*>(g), static_cast<const bf16*>(w), static_cast<bf16*>(y),
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

const char* rmsnorm_silu_gate_launch(const void* x, const void* g, const void* w, void* y, int64_t rows, int64_t D,
                                     float eps);

torch::Tensor rmsnorm_silu_gate_forward(torch::Tensor x, torch::Tensor g, torch::Tensor weight, double eps) {
    check_bf16_cuda(x, "x");
    check_bf16_cuda(g, "g");
    check_bf16_cuda(weight, "weight");
    TORCH_CHECK(x.sizes() == g.sizes(), "x and g must have the same shape");
    const int64_t D = x.size(-1);
    TORCH_CHECK(weight.numel() == D, "weight size mismatch");
    auto xc = x.contiguous();
    auto gc = g.contiguous();
    auto wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    const char* err = rmsnorm_silu_gate_launch(xc.data_ptr(), gc.data_ptr(), wc.data_ptr(), out.data_ptr(),
                                               D ? xc.numel() / D : 0, D, (float)eps);
    TORCH_CHECK(err == nullptr, "rmsnorm kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_rmsnorm_silu_gate_bf16", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["rmsnorm_silu_gate_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x, g):
        return _ext.rmsnorm_silu_gate_forward(x, g, self.weight, self.eps)
