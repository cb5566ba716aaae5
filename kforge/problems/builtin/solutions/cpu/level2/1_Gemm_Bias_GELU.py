import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <cmath>

// Wt[K,N] = float(W[N,K])^T (nn.Linear stores its weight as (out, in)); 32x32 tiles keep both sides cached.
// W may be float32, bfloat16 or float16; the transposed panel is float, widened once here.
template <typename T>
static torch::Tensor transpose2d(const torch::Tensor& w) {
    auto wc = w.contiguous();
    const int64_t N = wc.size(0), K = wc.size(1);
    auto t = torch::empty({K, N}, wc.options().dtype(torch::kFloat32));
    const T* s = wc.data_ptr<T>();
    float* d = t.data_ptr<float>();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n0 = 0; n0 < N; n0 += 32)
        for (int64_t k0 = 0; k0 < K; k0 += 32)
            for (int64_t n = n0; n < std::min(N, n0 + 32); ++n)
                for (int64_t k = k0; k < std::min(K, k0 + 32); ++k) d[k * N + n] = static_cast<float>(s[n * K + k]);
    return t;
}

// C[M,N] = A[M,K] @ B[K,N], row-major, B a float panel, C float. Each task owns 4 rows x 256 columns of C;
// float partial sums over K-chunks of 128 are added into double accumulators (float speed, near-double
// accuracy). A may be float32, bfloat16 or float16 (widened on load).
template <typename TA>
static void gemm_nn(const TA* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
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
                for (int64_t j = 0; j < nc; ++j) C[(i0 + r) * ldc + j0 + j] = (float)dacc[r][j];
        }
}

static inline float gelu_exact(double v) { return (float)(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440))); }

// y = gelu(acc + b), rounded once to y's storage type.
template <typename T>
static void bias_gelu_store(const float* acc, const T* b, T* y, int64_t M, int64_t N) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
            y[i * N + j] = static_cast<T>(gelu_exact((double)acc[i * N + j] + static_cast<float>(b[j])));
}

// y = gelu(x @ W^T + b) for x of any leading shape (..., in_features). Storage (x, W, b, y) is float32,
// bfloat16 or float16, all alike; the product is a float buffer, rounded once when y is stored.
torch::Tensor linear_gelu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    const auto st = x.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    TORCH_CHECK(weight.scalar_type() == st && bias.scalar_type() == st, "weight and bias must have x's dtype");
    const int64_t K = x.size(-1), N = weight.size(0);
    TORCH_CHECK(weight.size(1) == K && bias.numel() == N, "shape mismatch");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    const int64_t M = xc.numel() / K;
    auto sizes = xc.sizes().vec();
    sizes.back() = N;
    auto y = torch::empty(sizes, xc.options());
    auto acc = torch::empty({M, N}, xc.options().dtype(torch::kFloat32));
    float* ap = acc.data_ptr<float>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "linear_gelu_forward", [&] {
        auto wt = transpose2d<scalar_t>(weight);
        gemm_nn<scalar_t>(xc.data_ptr<scalar_t>(), wt.data_ptr<float>(), ap, M, N, K, K, N, N);
        bias_gelu_store<scalar_t>(ap, bc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), M, N);
    });
    return y;
}
"""

_ext = load_inline(name="kf_oracle_cpu_gemm_bias_gelu", cpp_sources=[cpp_source], functions=["linear_gelu_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ext.linear_gelu_forward(x, self.linear.weight, self.linear.bias)
