import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# bf16 sum over one dimension: x viewed as (outer, R, inner), out[p][c] = sum_r x[p][r][c] in fp32, rounded
# once. A block of 32 x 16 threads owns 32 * V columns of one p: threadIdx.x picks V adjacent columns (8 bf16 =
# one 16-byte load when V == 8, so a warp reads 512 contiguous bytes per row), threadIdx.y every 16th row; the
# 16 partial sums meet in shared memory.
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

constexpr int RS = 16;

template <int V>
__global__ void __launch_bounds__(32 * RS) sum_dim_kernel(const bf16* __restrict__ x, bf16* __restrict__ out,
                                                          int64_t R, int64_t inner, int64_t ncb) {
    __shared__ float part[RS][32 * V];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t p = blockIdx.x / ncb, cb = blockIdx.x % ncb;
    const int64_t c = (cb * 32 + tx) * V;  // first of this thread's columns; V == 8 implies inner % 8 == 0
    float acc[V];
    #pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0.f;
    if (c < inner) {
        const bf16* src = x + p * R * inner + c;
        #pragma unroll 4
        for (int64_t r = ty; r < R; r += RS) {
            if constexpr (V == 8) {
                float f[8];
                load8(src + r * inner, f);
                #pragma unroll
                for (int k = 0; k < 8; ++k) acc[k] += f[k];
            } else {
                acc[0] += __bfloat162float(src[r * inner]);
            }
        }
    }
    #pragma unroll
    for (int v = 0; v < V; ++v) part[ty][tx * V + v] = acc[v];
    __syncthreads();
    if (ty == 0 && c < inner) {
        #pragma unroll
        for (int v = 0; v < V; ++v) {
            float s = 0.f;
            #pragma unroll
            for (int j = 0; j < RS; ++j) s += part[j][tx * V + v];
            out[p * inner + c + v] = __float2bfloat16(s);
        }
    }
}

const char* sum_dim_launch(const void* xv, void* outv, int64_t outer, int64_t R, int64_t inner) {
    if (outer == 0 || inner == 0) return nullptr;
    const bf16* x = static_cast<const bf16*>(xv);
    bf16* out = static_cast<bf16*>(outv);
    const dim3 block(32, RS);
    if (inner % 8 == 0 && aligned16(x)) {
        const int64_t ncb = (inner / 8 + 31) / 32;
        sum_dim_kernel<8><<<(unsigned)(outer * ncb), block>>>(x, out, R, inner, ncb);
    } else {
        const int64_t ncb = (inner + 31) / 32;
        sum_dim_kernel<1><<<(unsigned)(outer * ncb), block>>>(x, out, R, inner, ncb);
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

const char* sum_dim_launch(const void* x, void* out, int64_t outer, int64_t R, int64_t inner);

torch::Tensor sum_forward(torch::Tensor x, int64_t dim) {
    check_bf16_cuda(x, "x");
    if (dim < 0) dim += x.dim();
    TORCH_CHECK(dim >= 0 && dim < x.dim(), "dim out of range");
    auto xc = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < xc.dim(); ++d) inner *= xc.size(d);
    auto sizes = xc.sizes().vec();
    sizes[dim] = 1;
    auto out = torch::empty(sizes, xc.options());
    const char* err = sum_dim_launch(xc.data_ptr(), out.data_ptr(), outer, xc.size(dim), inner);
    TORCH_CHECK(err == nullptr, "sum kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_sum_bf16", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["sum_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_forward(x, self.dim)
