# Hand-written solution (kforge's oracle, not an LLM): softmax's forward and backward as CUDA kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
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

// One block per row. Pass 1 reads the row once, keeping an online (max, sum of exp) per thread,
// merged over the block, and keeps the first C4 float4s of the row in shared memory. Pass 2 writes
// exp(x - max) / sum, taking the cached part from shared memory and re-reading the rest back to front
// (the most recently read part first, the likeliest to be still in L2).
__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t D, int64_t C4, bool vec) {
    extern __shared__ float4 cache4[];  // C4 float4s
    __shared__ float red_m[32], red_s[32];
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const float* xr = x + (int64_t)blockIdx.x * D;
    float* yr = y + (int64_t)blockIdx.x * D;
    const int64_t D4 = vec ? D / 4 : 0;  // float4 body, then a scalar tail (all of it when !vec)
    const float4* xr4 = reinterpret_cast<const float4*>(xr);
    float4* yr4 = reinterpret_cast<float4*>(yr);

    float m = -INFINITY, s = 0.f;
    #pragma unroll 4
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 v = xr4[i];
        if (i < C4) cache4[i] = v;
        const float mx = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
        if (mx > m) { s *= expf(m - mx); m = mx; }
        s += (expf(v.x - m) + expf(v.y - m)) + (expf(v.z - m) + expf(v.w - m));
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) ms_add(m, s, xr[i]);

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

    for (int64_t i = 4 * D4 + tid; i < D; i += nt) yr[i] = expf(xr[i] - row_max) * inv;
    #pragma unroll 4
    for (int64_t i = D4 - 1 - tid; i >= 0; i -= nt) {
        const float4 v = i < C4 ? cache4[i] : xr4[i];
        yr4[i] = make_float4(expf(v.x - row_max) * inv, expf(v.y - row_max) * inv,
                             expf(v.z - row_max) * inv, expf(v.w - row_max) * inv);
    }
}

const char* softmax_launch(const float* x, float* y, int64_t rows, int64_t D) {
    if (rows == 0 || D == 0) return nullptr;
    const bool vec = D % 4 == 0 && aligned16(x) && aligned16(y);
    const int threads = D >= 16384 ? 1024 : (D >= 2048 ? 256 : 128);
    // 96 KB of cache (up to 2 blocks of 1024 threads per SM): measured best at 4096 x 98304 on an H200
    const int64_t C4 = vec ? std::min<int64_t>(D / 4, 96 * 1024 / 16) : 0;
    const size_t smem = (size_t)C4 * 16;
    if (smem > 0) {
        const cudaError_t err = cudaFuncSetAttribute(softmax_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err != cudaSuccess) return cudaGetErrorString(err);
    }
    softmax_kernel<<<(unsigned)rows, threads, smem>>>(x, y, D, C4, vec);
    return launch_status();
}

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One block per row: dot = sum(g * y) over the row (float4 loads), then dx = y * (g - dot).
__global__ void softmax_bwd_kernel(const float* __restrict__ g, const float* __restrict__ y, float* __restrict__ dx,
                                   int64_t D, bool vec) {
    __shared__ float red[32];
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const int64_t off = (int64_t)blockIdx.x * D;
    const float *gr = g + off, *yr = y + off;
    float* dr = dx + off;
    const int64_t D4 = vec ? D / 4 : 0;
    const float4* g4 = reinterpret_cast<const float4*>(gr);
    const float4* y4 = reinterpret_cast<const float4*>(yr);
    float4* d4 = reinterpret_cast<float4*>(dr);
    float s = 0.f;
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 a = g4[i], b = y4[i];
        s += (a.x * b.x + a.y * b.y) + (a.z * b.z + a.w * b.w);
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) s += gr[i] * yr[i];
    s = warp_sum(s);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    const float dot = warp_sum(lane < (nt >> 5) ? red[lane] : 0.f);
    for (int64_t i = tid; i < D4; i += nt) {
        const float4 a = g4[i], b = y4[i];
        d4[i] = make_float4(b.x * (a.x - dot), b.y * (a.y - dot), b.z * (a.z - dot), b.w * (a.w - dot));
    }
    for (int64_t i = 4 * D4 + tid; i < D; i += nt) dr[i] = yr[i] * (gr[i] - dot);
}

const char* softmax_bwd_launch(const float* g, const float* y, float* dx, int64_t rows, int64_t D) {
    if (rows == 0 || D == 0) return nullptr;
    const bool vec = D % 4 == 0 && aligned16(g) && aligned16(y) && aligned16(dx);
    const int threads = D >= 16384 ? 1024 : (D >= 2048 ? 256 : 128);
    softmax_bwd_kernel<<<(unsigned)rows, threads>>>(g, y, dx, D, vec);
    return launch_status();
}
"""

cpp_source = r"""
static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* softmax_launch(const float* x, float* y, int64_t rows, int64_t D);

torch::Tensor softmax_forward(torch::Tensor x) {
    check_f32_cuda(x, "x");
    TORCH_CHECK(x.dim() >= 1, "x must have a last dimension");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t D = xc.size(-1);
    const char* err = softmax_launch(xc.data_ptr<float>(), out.data_ptr<float>(), D ? xc.numel() / D : 0, D);
    TORCH_CHECK(err == nullptr, "softmax kernel failed: ", err);
    return out;
}

const char* softmax_bwd_launch(const float* g, const float* y, float* dx, int64_t rows, int64_t D);

torch::Tensor softmax_backward(torch::Tensor grad, torch::Tensor y) {
    check_f32_cuda(grad, "grad");
    check_f32_cuda(y, "y");
    TORCH_CHECK(grad.sizes() == y.sizes(), "grad and y must have the same shape");
    auto gc = grad.contiguous();
    auto dx = torch::empty_like(y);
    const int64_t D = y.size(-1);
    const char* err = softmax_bwd_launch(gc.data_ptr<float>(), y.data_ptr<float>(), dx.data_ptr<float>(),
                                         D ? y.numel() / D : 0, D);
    TORCH_CHECK(err == nullptr, "softmax backward kernel failed: ", err);
    return dx;
}
"""

_ext = load_inline(name="kf_oracle_cuda_softmax_bwd", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["softmax_forward", "softmax_backward"], extra_cuda_cflags=["-O3"], verbose=False)


class SoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = _ext.softmax_forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _ext.softmax_backward(grad, y)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return SoftmaxFunction.apply(x)
