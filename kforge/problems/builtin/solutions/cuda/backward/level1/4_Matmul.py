# Hand-written solution (kforge's oracle, not an LLM): the matrix product's forward and both gradients
# (dA = dC B^T, dB = A^T dC) with one CUDA GEMM kernel behind a torch.autograd.Function, for the backward mode. The
# kernel reads either operand transposed in place (no transposed copies).
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

// 128x128 output tile per block of 256 threads (16 x 16), each thread 8x8 outputs: rows ty*4 + i and
// 64 + ty*4 + i, columns tx*4 + j and 64 + tx*4 + j (float4 shared-memory reads, no bank conflicts).
// K advances in steps of 16 through double-buffered shared memory; the next tile's global loads are
// issued into registers before the current tile's FFMAs. fp32 throughout (no TF32).
constexpr int BM = 128, BN = 128, BK = 16, PAD = 4, THREADS = 256;
typedef float SmemTile[BK][BM + PAD];

// Rows r0.. of a row-major (rows x K) matrix, k contiguous (A, or nn.Linear's (out, in) weight):
// each thread loads 2 x 4 consecutive k of one row. VEC: K % 4 == 0, ld % 4 == 0, 16-byte aligned.
template <bool VEC>
__device__ __forceinline__ void load_rows_k(const float* __restrict__ src, int64_t ld, int rows, int K,
                                            int r0, int k0, float (&reg)[8]) {
    const int t = threadIdx.x;
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int r = r0 + t / 4 + 64 * i, k = k0 + (t % 4) * 4;
        if (VEC) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < rows && k < K) v = __ldg(reinterpret_cast<const float4*>(src + (int64_t)r * ld + k));
            reg[4 * i] = v.x; reg[4 * i + 1] = v.y; reg[4 * i + 2] = v.z; reg[4 * i + 3] = v.w;
        } else {
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                reg[4 * i + j] = (r < rows && k + j < K) ? __ldg(src + (int64_t)r * ld + k + j) : 0.f;
        }
    }
}

// ... stored transposed, k-major: S[k][row].
__device__ __forceinline__ void store_rows_k(SmemTile& S, const float (&reg)[8]) {
    const int t = threadIdx.x;
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j) S[(t % 4) * 4 + j][t / 4 + 64 * i] = reg[4 * i + j];
}

// The 8x8 FFMAs of one BK step over a k-major A tile and a k-major B tile.
__device__ __forceinline__ void mma_tile(const SmemTile& As, const SmemTile& Bs, float (&acc)[8][8]) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    #pragma unroll
    for (int k = 0; k < BK; ++k) {
        const float4 a0 = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
        const float4 a1 = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
        const float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
        const float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
        const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
        #pragma unroll
        for (int i = 0; i < 8; ++i)
            #pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], bb[j], acc[i][j]);
    }
}

// Tile row of acc[i] (0..127) and tile column of acc[.][g * 4 + j] (g = 0, 1; j = 0..3).
__device__ __forceinline__ int tile_row(int i) { return (i < 4 ? 0 : 64) + (threadIdx.x / 16) * 4 + (i & 3); }
__device__ __forceinline__ int tile_col(int g) { return g * 64 + (threadIdx.x % 16) * 4; }

// Rows k0.. of a row-major (K x N) matrix, n contiguous: each thread loads 2 x 4 consecutive n of one k.
// VEC: N % 4 == 0, ld % 4 == 0, 16-byte aligned.
template <bool VEC>
__device__ __forceinline__ void load_k_cols(const float* __restrict__ src, int64_t ld, int K, int N,
                                            int k0, int c0, float (&reg)[8]) {
    const int t = threadIdx.x;
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int k = k0 + t / 32 + 8 * i, c = c0 + (t % 32) * 4;
        if (VEC) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (k < K && c < N) v = __ldg(reinterpret_cast<const float4*>(src + (int64_t)k * ld + c));
            reg[4 * i] = v.x; reg[4 * i + 1] = v.y; reg[4 * i + 2] = v.z; reg[4 * i + 3] = v.w;
        } else {
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                reg[4 * i + j] = (k < K && c + j < N) ? __ldg(src + (int64_t)k * ld + c + j) : 0.f;
        }
    }
}

__device__ __forceinline__ void store_k_cols(SmemTile& S, const float (&reg)[8]) {
    const int t = threadIdx.x;
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        *reinterpret_cast<float4*>(&S[t / 32 + 8 * i][(t % 32) * 4]) =
            make_float4(reg[4 * i], reg[4 * i + 1], reg[4 * i + 2], reg[4 * i + 3]);
}

struct GemmParams {
    const float* A;     // (M, K), leading dimension lda; with A_KM stored (K, M) instead (the transpose of A)
    const float* B;     // (K, N) with B_KN, else (N, K) (nn.Linear's weight), leading dimension ldb
    float* C;           // (M, N), leading dimension ldc
    const float* bias;  // (N) or nullptr
    const float* res;   // (M, N) with leading dimension ldc, or nullptr
    float* pre;         // (M, N) with leading dimension ldc, or nullptr: the value before the GELU (for a backward)
    int M, N, K;
    int64_t lda, ldb, ldc;
    bool gelu;
};

__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

// C = op(A) @ op(B) (+ bias[n]) (-> exact GELU, the value before it kept in pre) (+ res[m, n]). A stored k-major
// (A_KM: the transpose of a row-major matrix, as a weight's gradient X^T @ G reads X) loads like a k-major B.
template <bool A_KM, bool B_KN, bool VEC>
__global__ void __launch_bounds__(THREADS, 2) sgemm_kernel(GemmParams p) {
    __shared__ __align__(16) SmemTile As[2];
    __shared__ __align__(16) SmemTile Bs[2];
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[8][8];
    #pragma unroll
    for (int i = 0; i < 8; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
    float ra[8], rb[8];
    auto load = [&](int k0) {
        if (A_KM) load_k_cols<VEC>(p.A, p.lda, p.K, p.M, k0, m0, ra);
        else load_rows_k<VEC>(p.A, p.lda, p.M, p.K, m0, k0, ra);
        if (B_KN) load_k_cols<VEC>(p.B, p.ldb, p.K, p.N, k0, n0, rb);
        else load_rows_k<VEC>(p.B, p.ldb, p.N, p.K, n0, k0, rb);
    };
    auto store = [&](int buf) {
        if (A_KM) store_k_cols(As[buf], ra);
        else store_rows_k(As[buf], ra);
        if (B_KN) store_k_cols(Bs[buf], rb);
        else store_rows_k(Bs[buf], rb);
    };
    const int ntiles = (p.K + BK - 1) / BK;
    load(0);
    store(0);
    __syncthreads();
    for (int kt = 0; kt < ntiles; ++kt) {
        const int buf = kt & 1;
        if (kt + 1 < ntiles) load((kt + 1) * BK);  // in flight during the math below
        mma_tile(As[buf], Bs[buf], acc);
        if (kt + 1 < ntiles) store(buf ^ 1);       // that buffer was last read before the previous sync
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + tile_row(i);
        if (m >= p.M) continue;
        float* crow = p.C + (int64_t)m * p.ldc;
        float* prow = p.pre ? p.pre + (int64_t)m * p.ldc : nullptr;
        const float* rrow = p.res ? p.res + (int64_t)m * p.ldc : nullptr;
        #pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int n = n0 + tile_col(g);
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (n + j >= p.N) break;
                float x = acc[i][4 * g + j];
                if (p.bias) x += p.bias[n + j];
                if (prow) prow[n + j] = x;
                if (p.gelu) x = gelu_erf(x);
                if (rrow) x += rrow[n + j];
                crow[n + j] = x;
            }
        }
    }
}

template <bool A_KM, bool B_KN>
static void gemm_dispatch(const GemmParams& p, bool vec, dim3 grid) {
    if (vec) sgemm_kernel<A_KM, B_KN, true><<<grid, THREADS>>>(p);
    else sgemm_kernel<A_KM, B_KN, false><<<grid, THREADS>>>(p);
}

// C (M, N) = op(A) @ op(B): a_km, A stored (K, M); b_kn, B stored (K, N), else (N, K).
const char* gemm_launch(const float* A, const float* B, float* C, int M, int N, int K, int64_t lda, int64_t ldb,
                        int64_t ldc, bool a_km, bool b_kn, const float* bias, const float* res, float* pre,
                        bool gelu) {
    if (M == 0 || N == 0) return nullptr;
    const GemmParams p{A, B, C, bias, res, pre, M, N, K, lda, ldb, ldc, gelu};
    const bool vec = M % 4 == 0 && K % 4 == 0 && N % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 && aligned16(A) &&
                     aligned16(B);
    const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    if (a_km) {
        if (b_kn) gemm_dispatch<true, true>(p, vec, grid);
        else gemm_dispatch<true, false>(p, vec, grid);
    } else {
        if (b_kn) gemm_dispatch<false, true>(p, vec, grid);
        else gemm_dispatch<false, false>(p, vec, grid);
    }
    return launch_status();
}
"""

cpp_source = r"""
#include <vector>

static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* gemm_launch(const float* A, const float* B, float* C, int M, int N, int K, int64_t lda, int64_t ldb,
                        int64_t ldc, bool a_km, bool b_kn, const float* bias, const float* res, float* pre,
                        bool gelu);

// C = op(A) @ op(B) for contiguous A and B: a_km reads A (K, M) as its transpose; b_kn reads B as (K, N), else
// (N, K) as its transpose.
static torch::Tensor gemm(const torch::Tensor& A, const torch::Tensor& B, bool a_km, bool b_kn) {
    const int64_t M = a_km ? A.size(1) : A.size(0), K = a_km ? A.size(0) : A.size(1);
    const int64_t N = b_kn ? B.size(1) : B.size(0);
    TORCH_CHECK((b_kn ? B.size(0) : B.size(1)) == K, "inner dimensions differ");
    auto c = torch::empty({M, N}, A.options());
    const char* err = gemm_launch(A.data_ptr<float>(), B.data_ptr<float>(), c.data_ptr<float>(), (int)M, (int)N, (int)K,
                                  A.size(1), B.size(1), N, a_km, b_kn, nullptr, nullptr, nullptr, false);
    TORCH_CHECK(err == nullptr, "gemm kernel failed: ", err);
    return c;
}

torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B) {
    check_f32_cuda(A, "A");
    check_f32_cuda(B, "B");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes (M, K) @ (K, N) expected");
    return gemm(A.contiguous(), B.contiguous(), false, true);
}

// dA (M, K) = dC @ B^T: B (K, N) read as the (N, K)-stored operand; dB (K, N) = A^T @ dC: A (M, K) read k-major.
std::vector<torch::Tensor> matmul_backward(torch::Tensor dC, torch::Tensor A, torch::Tensor B) {
    check_f32_cuda(dC, "grad");
    auto g = dC.contiguous(), a = A.contiguous(), b = B.contiguous();
    return {gemm(g, b, false, false), gemm(a, g, true, true)};
}
"""

_ext = load_inline(name="kf_oracle_cuda_matmul_bwd", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["matmul_forward", "matmul_backward"], extra_cuda_cflags=["-O3"], verbose=False)


class MatmulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, B):
        ctx.save_for_backward(A, B)
        return _ext.matmul_forward(A, B)

    @staticmethod
    def backward(ctx, dC):
        A, B = ctx.saved_tensors
        dA, dB = _ext.matmul_backward(dC, A, B)
        return dA, dB


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return MatmulFunction.apply(A, B)
