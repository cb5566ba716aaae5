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

// x viewed as (outer, R, inner); out[p][c] = sum_r x[p][r][c]. A block of 32 x 16 threads owns
// 32 * V columns of one p: threadIdx.x picks V adjacent columns (a float4 when V == 4, so a warp reads
// 512 contiguous bytes per row), threadIdx.y every 16th row; the 16 partial sums meet in shared memory.
constexpr int RS = 16;

template <int V>
__global__ void __launch_bounds__(32 * RS) sum_dim_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                          int64_t R, int64_t inner, int64_t ncb) {
    __shared__ float part[RS][32 * V];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t p = blockIdx.x / ncb, cb = blockIdx.x % ncb;
    const int64_t c = (cb * 32 + tx) * V;  // first of this thread's columns; V == 4 implies inner % 4 == 0
    float acc[V];
    #pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0.f;
    if (c < inner) {
        const float* src = x + p * R * inner + c;
        #pragma unroll 4
        for (int64_t r = ty; r < R; r += RS) {
            if constexpr (V == 4) {
                const float4 v = __ldg(reinterpret_cast<const float4*>(src + r * inner));
                acc[0] += v.x; acc[1] += v.y; acc[2] += v.z; acc[3] += v.w;
            } else {
                acc[0] += __ldg(src + r * inner);
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
            out[p * inner + c + v] = s;
        }
    }
}

const char* sum_dim_launch(const float* x, float* out, int64_t outer, int64_t R, int64_t inner) {
    if (outer == 0 || inner == 0) return nullptr;
    const dim3 block(32, RS);
    if (inner % 4 == 0 && aligned16(x) && aligned16(out)) {
        const int64_t ncb = (inner / 4 + 31) / 32;
        sum_dim_kernel<4><<<(unsigned)(outer * ncb), block>>>(x, out, R, inner, ncb);
    } else {
        const int64_t ncb = (inner + 31) / 32;
        sum_dim_kernel<1><<<(unsigned)(outer * ncb), block>>>(x, out, R, inner, ncb);
    }
    return launch_status();
}
"""

cpp_source = r"""
static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* sum_dim_launch(const float* x, float* out, int64_t outer, int64_t R, int64_t inner);

torch::Tensor sum_forward(torch::Tensor x, int64_t dim) {
    check_f32_cuda(x, "x");
    if (dim < 0) dim += x.dim();
    TORCH_CHECK(dim >= 0 && dim < x.dim(), "dim out of range");
    auto xc = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < xc.dim(); ++d) inner *= xc.size(d);
    auto sizes = xc.sizes().vec();
    sizes[dim] = 1;
    auto out = torch::empty(sizes, xc.options());
    const char* err = sum_dim_launch(xc.data_ptr<float>(), out.data_ptr<float>(), outer, xc.size(dim), inner);
    TORCH_CHECK(err == nullptr, "sum kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_sum", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["sum_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_forward(x, self.dim)
