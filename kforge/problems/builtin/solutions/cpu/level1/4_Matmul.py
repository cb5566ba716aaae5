import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <type_traits>

// C[M,N] = A[M,K] @ B[K,N], row-major. Each task owns 4 rows x 256 columns of C; float partial
// sums over K-chunks of 128 are added into double accumulators (float speed, near-double accuracy).
// A and C may be float32, bfloat16 or float16 (widened to float on load, rounded once on store); B is a
// float panel (the caller widens a reduced-precision B once, outside the O(MNK) loop).
template <typename TA, typename TC>
static void gemm_nn(const TA* A, const float* B, TC* C, int64_t M, int64_t N, int64_t K,
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
                    const float a0 = static_cast<float>(A[i0 * lda + k]);
                    const float a1 = mr > 1 ? static_cast<float>(A[(i0 + 1) * lda + k]) : 0.f;
                    const float a2 = mr > 2 ? static_cast<float>(A[(i0 + 2) * lda + k]) : 0.f;
                    const float a3 = mr > 3 ? static_cast<float>(A[(i0 + 3) * lda + k]) : 0.f;
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
                for (int64_t j = 0; j < nc; ++j) C[(i0 + r) * ldc + j0 + j] = static_cast<TC>((float)dacc[r][j]);
        }
}

// A float copy of a contiguous tensor's elements (identity for float32: no copy is made).
template <typename T>
static torch::Tensor widened(const torch::Tensor& t) {
    if (std::is_same<T, float>::value) return t;
    auto f = torch::empty(t.sizes(), t.options().dtype(torch::kFloat32));
    const T* s = t.data_ptr<T>();
    float* d = f.data_ptr<float>();
    const int64_t n = t.numel();
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);
    return f;
}

torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B) {
    const auto st = A.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    TORCH_CHECK(B.scalar_type() == st, "A and B must have the same dtype");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes (M,K) @ (K,N) expected");
    auto a = A.contiguous();
    auto b = B.contiguous();
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::empty({M, N}, a.options());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "matmul_forward", [&] {
        auto bf = widened<scalar_t>(b);
        gemm_nn<scalar_t, scalar_t>(a.data_ptr<scalar_t>(), bf.data_ptr<float>(), c.data_ptr<scalar_t>(),
                                    M, N, K, K, N, N);
    });
    return c;
}
"""

_ext = load_inline(name="kf_oracle_cpu_matmul", cpp_sources=[cpp_source], functions=["matmul_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.matmul_forward(A, B)
