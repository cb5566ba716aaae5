# Hand-written solution (kforge's oracle, not an LLM): the matrix product's forward and both gradients
# (dA = dC B^T, dB = A^T dC) as C++ kernels behind a torch.autograd.Function, for the backward mode.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <vector>

// C[M,N] = A[M,K] @ B[K,N], row-major. Each task owns 4 rows x 256 columns of C; float partial
// sums over K-chunks of 128 are added into double accumulators (float speed, near-double accuracy).
static void gemm_nn(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                    int64_t lda, int64_t ldb, int64_t ldc) {
    constexpr int64_t MR = 4, NC = 256, KC = 128;
    const int64_t mblocks = (M + MR - 1) / MR, nblocks = (N + NC - 1) / NC;
    // column panels outermost: consecutive tasks of a thread reuse the same panel of B from cache
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t nb = 0; nb < nblocks; ++nb)
        for (int64_t mb = 0; mb < mblocks; ++mb) {
            const int64_t i0 = mb * MR, mr = std::min(MR, M - i0);
            const int64_t j0 = nb * NC, nc = std::min(NC, N - j0);
            double dacc[MR][NC];
            float f0[NC], f1[NC], f2[NC], f3[NC];
            for (int64_t r = 0; r < MR; ++r)
                for (int64_t j = 0; j < nc; ++j) dacc[r][j] = 0.0;
            for (int64_t k0 = 0; k0 < K; k0 += KC) {
                const int64_t k1 = std::min(K, k0 + KC);
                for (int64_t j = 0; j < nc; ++j) f0[j] = f1[j] = f2[j] = f3[j] = 0.f;
                for (int64_t k = k0; k < k1; ++k) {
                    // rows past M multiply by zero and are never stored
                    const float a0 = A[i0 * lda + k];
                    const float a1 = mr > 1 ? A[(i0 + 1) * lda + k] : 0.f;
                    const float a2 = mr > 2 ? A[(i0 + 2) * lda + k] : 0.f;
                    const float a3 = mr > 3 ? A[(i0 + 3) * lda + k] : 0.f;
                    const float* b = B + k * ldb + j0;
                    for (int64_t j = 0; j < nc; ++j) {
                        const float bj = b[j];
                        f0[j] += a0 * bj; f1[j] += a1 * bj; f2[j] += a2 * bj; f3[j] += a3 * bj;
                    }
                }
                for (int64_t j = 0; j < nc; ++j) {
                    dacc[0][j] += f0[j]; dacc[1][j] += f1[j]; dacc[2][j] += f2[j]; dacc[3][j] += f3[j];
                }
            }
            for (int64_t r = 0; r < mr; ++r)
                for (int64_t j = 0; j < nc; ++j) C[(i0 + r) * ldc + j0 + j] = (float)dacc[r][j];
        }
}

// T[C,R] = S[R,C]^T in 32x32 tiles (both sides stay in cache).
static torch::Tensor transpose2d(const torch::Tensor& s) {
    auto sc = s.contiguous();
    const int64_t R = sc.size(0), C = sc.size(1);
    auto t = torch::empty({C, R}, sc.options());
    const float* src = sc.data_ptr<float>();
    float* dst = t.data_ptr<float>();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t r0 = 0; r0 < R; r0 += 32)
        for (int64_t c0 = 0; c0 < C; c0 += 32)
            for (int64_t r = r0; r < std::min(R, r0 + 32); ++r)
                for (int64_t c = c0; c < std::min(C, c0 + 32); ++c) dst[c * R + r] = src[r * C + c];
    return t;
}

static torch::Tensor mm_f32(const torch::Tensor& A, const torch::Tensor& B) {
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "float32 expected");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes (M,K) @ (K,N) expected");
    auto a = A.contiguous();
    auto b = B.contiguous();
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::empty({M, N}, a.options());
    gemm_nn(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K, K, N, N);
    return c;
}

torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B) { return mm_f32(A, B); }

// dA[M,K] = dC[M,N] @ B^T, dB[K,N] = A^T @ dC
std::vector<torch::Tensor> matmul_backward(torch::Tensor dC, torch::Tensor A, torch::Tensor B) {
    return {mm_f32(dC, transpose2d(B)), mm_f32(transpose2d(A), dC)};
}
"""

_ext = load_inline(name="kf_oracle_cpu_matmul_bwd", cpp_sources=[cpp_source],
                   functions=["matmul_forward", "matmul_backward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


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
