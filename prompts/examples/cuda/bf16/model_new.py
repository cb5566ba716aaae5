import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# CUDA part (no torch headers): out = relu(x @ W^T + b) on the tensor cores with WMMA. A block of 4 warps
# computes a 32x32 tile of out; each warp one 16x16 piece. Per step of 16 along K the block stages bf16
# tiles of x and W in shared memory (zeros past the edges, so any size works), and each warp multiplies
# bf16 fragments into a float32 accumulator fragment. The epilogue adds the bias, applies ReLU in float32
# and rounds to bf16 once, on the store.
cuda_source = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <cstdint>
using namespace nvcuda;

constexpr int TILE = 32, KS = 16, LDS = KS + 8;  // +8 bf16 per row: fewer shared-memory bank conflicts

__global__ void linear_relu_wmma(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                                 const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ out,
                                 int M, int N, int K) {
    __shared__ __align__(32) __nv_bfloat16 xs[TILE][LDS];  // x rows m0.., k contiguous
    __shared__ __align__(32) __nv_bfloat16 ws[TILE][LDS];  // W rows n0.. (nn.Linear's (N, K)), k contiguous
    __shared__ __align__(32) float cs[4][16][16];          // each warp's accumulator, for the epilogue
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / 2) * 16, wn = (warp % 2) * 16;  // this warp's 16x16 piece of the tile
    const int m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += KS) {
        for (int i = threadIdx.x; i < TILE * KS; i += blockDim.x) {  // 128 threads, 512 elements per tile
            const int r = i / KS, c = i % KS, k = k0 + c;
            xs[r][c] = (m0 + r < M && k < K) ? x[(int64_t)(m0 + r) * K + k] : __float2bfloat16(0.f);
            ws[r][c] = (n0 + r < N && k < K) ? w[(int64_t)(n0 + r) * K + k] : __float2bfloat16(0.f);
        }
        __syncthreads();
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;  // W^T: (k, n) at ws[n][k]
        wmma::load_matrix_sync(a, &xs[wm][0], LDS);
        wmma::load_matrix_sync(b, &ws[wn][0], LDS);
        wmma::mma_sync(acc, a, b, acc);
        __syncthreads();  // the tiles are overwritten next step
    }
    wmma::store_matrix_sync(&cs[warp][0][0], acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 256; i += 32) {
        const int m = m0 + wm + i / 16, n = n0 + wn + i % 16;
        if (m < M && n < N) {
            const float v = cs[warp][i / 16][i % 16] + __bfloat162float(bias[n]);
            out[(int64_t)m * N + n] = __float2bfloat16(v > 0.f ? v : 0.f);
        }
    }
}

const char* linear_relu_launch(const void* x, const void* w, const void* b, void* out, int M, int N, int K) {
    if (M == 0 || N == 0) return nullptr;
    const dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    linear_relu_wmma<<<grid, 128>>>(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w),
                                    static_cast<const __nv_bfloat16*>(b), static_cast<__nv_bfloat16*>(out), M, N, K);
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

# C++ part (load_inline prefixes it with #include <torch/extension.h>): checks, allocation, launch.
cpp_source = r"""
const char* linear_relu_launch(const void* x, const void* w, const void* b, void* out, int M, int N, int K);

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && b.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16 &&
                b.scalar_type() == torch::kBFloat16, "bfloat16 x, weight and bias expected");
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && b.numel() == w.size(0), "shape mismatch");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty({xc.size(0), wc.size(0)}, xc.options());  // bf16, every element written
    const char* err = linear_relu_launch(xc.data_ptr(), wc.data_ptr(), bc.data_ptr(), out.data_ptr(),
                                         (int)xc.size(0), (int)wc.size(0), (int)xc.size(1));
    TORCH_CHECK(err == nullptr, "linear_relu kernel failed: ", err);
    return out;
}
"""

linear_relu_ext = load_inline(
    name="linear_relu_bf16_cuda_ext",
    cpp_sources=[cpp_source],
    cuda_sources=[cuda_source],
    functions=["linear_relu"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same constructor and parameters as Model (the harness casts them to bf16); the work is in CUDA."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_relu_ext.linear_relu(x, self.linear.weight, self.linear.bias)
