# Hand-written solution (kforge's oracle, not an LLM): the pre-norm MLP block's forward and backward as CUDA kernels
# behind a torch.autograd.Function, for the backward mode (verify.backward=true). One GEMM kernel serves the forward's
# two products (bias, GELU and residual fused; the value before the GELU kept) and the backward's four (reading
# either operand transposed in place); the norm and the bias gradients are kernels of their own.
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

// One block per row: y = (x - mean) * rstd * w + b; keeps the row's mean and 1/std for the backward.
__global__ void ln_fwd_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                              float* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                              int64_t D, float eps) {
    __shared__ float red[32];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t row = blockIdx.x;
    const float* xr = x + row * D;
    float* yr = y + row * D;
    float s = 0.f;
    for (int64_t i = tid; i < D; i += nt) s += xr[i];
    const float mean = block_sum(s, red) / (float)D;
    float q = 0.f;
    for (int64_t i = tid; i < D; i += nt) { const float d = xr[i] - mean; q += d * d; }
    const float rstd = rsqrtf(block_sum(q, red) / (float)D + eps);  // biased variance, as nn.LayerNorm
    if (tid == 0) { mean_out[row] = mean; rstd_out[row] = rstd; }
    for (int64_t i = tid; i < D; i += nt) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

// One block per row: dx = res + rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)) (res: a residual's gradient
// added in the same pass, or nullptr).
__global__ void ln_bwd_dx_kernel(const float* __restrict__ g, const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ mean, const float* __restrict__ rstd,
                                 const float* __restrict__ res, float* __restrict__ dx, int64_t D) {
    __shared__ float red[32];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t row = blockIdx.x;
    const float *gr = g + row * D, *xr = x + row * D;
    const float mu = mean[row], rs = rstd[row];
    float a1 = 0.f, a2 = 0.f;
    for (int64_t i = tid; i < D; i += nt) {
        const float gw = gr[i] * w[i];
        a1 += gw;
        a2 += gw * (xr[i] - mu) * rs;
    }
    const float c1 = block_sum(a1, red) / (float)D;
    const float c2 = block_sum(a2, red) / (float)D;
    float* dr = dx + row * D;
    const float* rr = res ? res + row * D : nullptr;
    for (int64_t i = tid; i < D; i += nt) {
        const float v = rs * (gr[i] * w[i] - c1 - (xr[i] - mu) * rs * c2);
        dr[i] = rr ? rr[i] + v : v;
    }
}

// dw = sum over rows of g * xhat, db = sum of g, in two stages: blocks of 32 x 8 threads own 32 columns and a
// slice of the rows (threadIdx.x: the column, coalesced; threadIdx.y: the row), write one partial sum per slice,
// and column_finish adds the slices in order (no atomics: the same result every run).
__global__ void ln_dwdb_partial_kernel(const float* __restrict__ g, const float* __restrict__ x,
                                       const float* __restrict__ mean, const float* __restrict__ rstd,
                                       float* __restrict__ pw, float* __restrict__ pb, int64_t rows, int64_t D) {
    __shared__ float sw[8][33], sb[8][33];
    const int64_t col = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float aw = 0.f, ab = 0.f;
    if (col < D)
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < rows; r += (int64_t)gridDim.y * 8) {
            const float gv = g[r * D + col];
            aw += gv * (x[r * D + col] - mean[r]) * rstd[r];
            ab += gv;
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && col < D) {
        float tw = 0.f, tb = 0.f;
        #pragma unroll
        for (int k = 0; k < 8; ++k) { tw += sw[k][threadIdx.x]; tb += sb[k][threadIdx.x]; }
        pw[(int64_t)blockIdx.y * D + col] = tw;
        pb[(int64_t)blockIdx.y * D + col] = tb;
    }
}

__global__ void column_finish_kernel(const float* __restrict__ part, float* __restrict__ out, int slices, int64_t D) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= D) return;
    float s = 0.f;
    for (int k = 0; k < slices; ++k) s += part[(int64_t)k * D + col];
    out[col] = s;
}

// Row slices for a two-stage column reduction: about a thousand blocks in all, at least 64 rows a slice.
static int row_slices(int64_t rows, int64_t D) {
    const int64_t col_blocks = (D + 31) / 32;
    return (int)std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(1, 1024 / col_blocks), (rows + 63) / 64));
}

static int row_threads(int64_t D) { return D >= 4096 ? 512 : (D >= 1024 ? 256 : 128); }

// Plain column sums (a bias's gradient), stage one of two as ln_dwdb_partial_kernel.
__global__ void colsum_partial_kernel(const float* __restrict__ x, float* __restrict__ part, int64_t rows, int64_t D) {
    __shared__ float s[8][33];
    const int64_t col = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (col < D)
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < rows; r += (int64_t)gridDim.y * 8) acc += x[r * D + col];
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < D) {
        float t = 0.f;
        #pragma unroll
        for (int k = 0; k < 8; ++k) t += s[k][threadIdx.x];
        part[(int64_t)blockIdx.y * D + col] = t;
    }
}

// du = da * GELU'(u) in place, exact GELU: Phi(u) + u * phi(u)
__global__ void gelu_bwd_kernel(float* __restrict__ da, const float* __restrict__ u, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = u[i];
        da[i] *= 0.5f * (1.f + erff(v * 0.70710678118654752f)) + v * 0.39894228040143267f * expf(-0.5f * v * v);
    }
}

const char* ln_fwd_launch(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                          int64_t rows, int64_t D, float eps) {
    if (rows == 0 || D == 0) return nullptr;
    ln_fwd_kernel<<<(unsigned)rows, row_threads(D)>>>(x, w, b, y, mean, rstd, D, eps);
    return launch_status();
}

// dx = res + LayerNorm's backward of g; dw, db through per-slice partials (pw, pb: slices x D).
const char* ln_bwd_launch(const float* g, const float* x, const float* w, const float* mean, const float* rstd,
                          const float* res, float* dx, float* dw, float* db, float* pw, float* pb, int slices,
                          int64_t rows, int64_t D) {
    if (rows == 0 || D == 0) return nullptr;
    ln_bwd_dx_kernel<<<(unsigned)rows, row_threads(D)>>>(g, x, w, mean, rstd, res, dx, D);
    ln_dwdb_partial_kernel<<<dim3((unsigned)((D + 31) / 32), (unsigned)slices), dim3(32, 8)>>>(g, x, mean, rstd, pw, pb,
                                                                                              rows, D);
    const unsigned fin = (unsigned)((D + 255) / 256);
    column_finish_kernel<<<fin, 256>>>(pw, dw, slices, D);
    column_finish_kernel<<<fin, 256>>>(pb, db, slices, D);
    return launch_status();
}

const char* colsum_launch(const float* x, float* out, float* part, int slices, int64_t rows, int64_t D) {
    if (D == 0) return nullptr;
    colsum_partial_kernel<<<dim3((unsigned)((D + 31) / 32), (unsigned)slices), dim3(32, 8)>>>(x, part, rows, D);
    column_finish_kernel<<<(unsigned)((D + 255) / 256), 256>>>(part, out, slices, D);
    return launch_status();
}

const char* gelu_bwd_launch(float* da, const float* u, int64_t n) {
    if (n == 0) return nullptr;
    gelu_bwd_kernel<<<(unsigned)std::min<int64_t>((n + 255) / 256, 65535), 256>>>(da, u, n);
    return launch_status();
}

int mlp_row_slices(int64_t rows, int64_t D) { return row_slices(rows, D); }
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
const char* ln_fwd_launch(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                          int64_t rows, int64_t D, float eps);
const char* ln_bwd_launch(const float* g, const float* x, const float* w, const float* mean, const float* rstd,
                          const float* res, float* dx, float* dw, float* db, float* pw, float* pb, int slices,
                          int64_t rows, int64_t D);
const char* colsum_launch(const float* x, float* out, float* part, int slices, int64_t rows, int64_t D);
const char* gelu_bwd_launch(float* da, const float* u, int64_t n);
int mlp_row_slices(int64_t rows, int64_t D);

static void ok(const char* err, const char* what) { TORCH_CHECK(err == nullptr, what, " failed: ", err); }

// C = op(A) @ op(B) (+ bias) (GELU, the value before it in pre) (+ res), A and B contiguous: a_km reads A (K, M) as
// its transpose; b_kn reads B as (K, N), else (N, K) (nn.Linear's weight) as its transpose.
static torch::Tensor gemm(const torch::Tensor& A, const torch::Tensor& B, bool a_km, bool b_kn,
                          const torch::Tensor* bias = nullptr, const torch::Tensor* res = nullptr,
                          torch::Tensor* pre = nullptr) {
    const int64_t M = a_km ? A.size(1) : A.size(0), K = a_km ? A.size(0) : A.size(1);
    const int64_t N = b_kn ? B.size(1) : B.size(0);
    TORCH_CHECK((b_kn ? B.size(0) : B.size(1)) == K, "inner dimensions differ");
    auto c = torch::empty({M, N}, A.options());
    if (pre) *pre = torch::empty({M, N}, A.options());
    ok(gemm_launch(A.data_ptr<float>(), B.data_ptr<float>(), c.data_ptr<float>(), (int)M, (int)N, (int)K, A.size(1),
                   B.size(1), N, a_km, b_kn, bias ? bias->data_ptr<float>() : nullptr,
                   res ? res->data_ptr<float>() : nullptr, pre ? pre->data_ptr<float>() : nullptr, pre != nullptr),
       "gemm kernel");
    return c;
}

static torch::Tensor column_sums(const torch::Tensor& x) {
    const int64_t rows = x.size(0), D = x.size(1);
    const int slices = mlp_row_slices(rows, D);
    auto out = torch::empty({D}, x.options());
    auto part = torch::empty({slices, D}, x.options());
    ok(colsum_launch(x.data_ptr<float>(), out.data_ptr<float>(), part.data_ptr<float>(), slices, rows, D),
       "column sum kernels");
    return out;
}

// out = x + fc2(gelu(fc1(layernorm(x)))), with what the backward needs: h = layernorm(x), u = fc1(h) (before the
// GELU), a = gelu(u), and each row's mean and 1/std.
std::vector<torch::Tensor> mlp_forward(torch::Tensor x, torch::Tensor ln_w, torch::Tensor ln_b, double eps,
                                       torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2) {
    check_f32_cuda(x, "x");
    const int64_t D = x.size(-1), Hd = w1.size(0);
    TORCH_CHECK(ln_w.numel() == D && ln_b.numel() == D && w1.size(1) == D && b1.numel() == Hd && w2.size(0) == D &&
                w2.size(1) == Hd && b2.numel() == D, "shape mismatch");
    auto x2 = x.contiguous().view({-1, D});
    const int64_t T = x2.size(0);
    auto lw = ln_w.contiguous(), lb = ln_b.contiguous(), w1c = w1.contiguous(), w2c = w2.contiguous();
    auto b1c = b1.contiguous(), b2c = b2.contiguous();
    auto h = torch::empty_like(x2);
    auto mean = torch::empty({T}, x2.options()), rstd = torch::empty({T}, x2.options());
    ok(ln_fwd_launch(x2.data_ptr<float>(), lw.data_ptr<float>(), lb.data_ptr<float>(), h.data_ptr<float>(),
                     mean.data_ptr<float>(), rstd.data_ptr<float>(), T, D, (float)eps), "layernorm kernel");
    torch::Tensor u;
    auto a = gemm(h, w1c, false, false, &b1c, nullptr, &u);   // (T, D) @ W1^T: GELU epilogue, u kept
    auto out = gemm(a, w2c, false, false, &b2c, &x2);         // (T, 4D) @ W2^T + b2 + x
    return {out.view(x.sizes()), h, u, a, mean, rstd};
}

// The gradients of x, the norm's weight and bias, fc1's weight and bias, fc2's weight and bias from g = d out.
std::vector<torch::Tensor> mlp_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor ln_w, torch::Tensor mean,
                                        torch::Tensor rstd, torch::Tensor h, torch::Tensor u, torch::Tensor a,
                                        torch::Tensor w1, torch::Tensor w2) {
    check_f32_cuda(grad, "grad");
    const int64_t D = x.size(-1);
    auto g = grad.contiguous().view({-1, D});
    auto x2 = x.contiguous().view({-1, D});
    auto w1c = w1.contiguous(), w2c = w2.contiguous(), lw = ln_w.contiguous();
    const int64_t T = g.size(0);
    auto db2 = column_sums(g);
    auto dw2 = gemm(g, a, true, true);      // g^T (D, T) @ a (T, 4D)
    auto du = gemm(g, w2c, false, true);    // g (T, D) @ W2 (D, 4D): d a
    ok(gelu_bwd_launch(du.data_ptr<float>(), u.data_ptr<float>(), du.numel()), "gelu backward kernel");
    auto db1 = column_sums(du);
    auto dw1 = gemm(du, h, true, true);     // du^T (4D, T) @ h (T, D)
    auto dh = gemm(du, w1c, false, true);   // du (T, 4D) @ W1 (4D, D)
    const int slices = mlp_row_slices(T, D);
    auto dx = torch::empty_like(x2);
    auto dlw = torch::empty({D}, x2.options()), dlb = torch::empty({D}, x2.options());
    auto pw = torch::empty({slices, D}, x2.options()), pb = torch::empty({slices, D}, x2.options());
    ok(ln_bwd_launch(dh.data_ptr<float>(), x2.data_ptr<float>(), lw.data_ptr<float>(), mean.data_ptr<float>(),
                     rstd.data_ptr<float>(), g.data_ptr<float>(), dx.data_ptr<float>(), dlw.data_ptr<float>(),
                     dlb.data_ptr<float>(), pw.data_ptr<float>(), pb.data_ptr<float>(), slices, T, D),
       "layernorm backward kernels");
    return {dx.view(x.sizes()), dlw, dlb, dw1, db1, dw2, db2};
}
"""

_ext = load_inline(name="kf_oracle_cuda_mlp_block_bwd", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["mlp_forward", "mlp_backward"], extra_cuda_cflags=["-O3"], verbose=False)


class MLPBlockFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ln_w, ln_b, eps, w1, b1, w2, b2):
        out, h, u, a, mean, rstd = _ext.mlp_forward(x, ln_w, ln_b, eps, w1, b1, w2, b2)
        ctx.save_for_backward(x, ln_w, mean, rstd, h, u, a, w1, w2)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, ln_w, mean, rstd, h, u, a, w1, w2 = ctx.saved_tensors
        dx, dlw, dlb, dw1, db1, dw2, db2 = _ext.mlp_backward(grad, x, ln_w, mean, rstd, h, u, a, w1, w2)
        return dx, dlw, dlb, None, dw1, db1, dw2, db2


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)  # the reference's parameters, by the same names
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        n = self.norm
        return MLPBlockFunction.apply(x, n.weight, n.bias, n.eps, self.fc1.weight, self.fc1.bias, self.fc2.weight,
                                      self.fc2.bias)
