# Hand-written solution (kforge's oracle, not an LLM): the pre-norm MLP block's forward and backward as C++
# kernels behind a torch.autograd.Function, for the backward mode (verify.backward=true). The forward keeps
# the norm's output, the hidden pre-activation and the GELU's output for the backward.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <cmath>
#include <vector>
#include <omp.h>

// Wt[K,N] = W[N,K]^T (nn.Linear stores its weight as (out, in)); 32x32 tiles keep both sides cached.
static torch::Tensor transpose2d(const torch::Tensor& w) {
    auto wc = w.contiguous();
    const int64_t N = wc.size(0), K = wc.size(1);
    auto t = torch::empty({K, N}, wc.options());
    const float* s = wc.data_ptr<float>();
    float* d = t.data_ptr<float>();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n0 = 0; n0 < N; n0 += 32)
        for (int64_t k0 = 0; k0 < K; k0 += 32)
            for (int64_t n = n0; n < std::min(N, n0 + 32); ++n)
                for (int64_t k = k0; k < std::min(K, k0 + 32); ++k) d[k * N + n] = s[n * K + k];
    return t;
}

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

static inline double gelu_exact(double v) { return 0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)); }
static inline double gelu_grad(double v) {
    return 0.5 * (1.0 + std::erf(v * 0.70710678118654752440)) + v * 0.39894228040143267794 * std::exp(-0.5 * v * v);
}

static torch::Tensor mm_f32(const torch::Tensor& A, const torch::Tensor& B) {
    auto a = A.contiguous(), b = B.contiguous();
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::empty({M, N}, a.options());
    gemm_nn(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K, K, N, N);
    return c;
}

// Column sums of a (T, N) matrix: per-thread double partials over rows, added at the end.
static torch::Tensor column_sums(const torch::Tensor& m) {
    const int64_t T = m.size(0), N = m.size(1);
    const float* p = m.data_ptr<float>();
    const int threads = omp_get_max_threads();
    std::vector<double> part((size_t)threads * N, 0.0);
    #pragma omp parallel
    {
        double* t = part.data() + (size_t)omp_get_thread_num() * N;
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < T; ++i)
            for (int64_t j = 0; j < N; ++j) t[j] += p[i * N + j];
    }
    auto out = torch::empty({N}, m.options());
    float* o = out.data_ptr<float>();
    for (int64_t j = 0; j < N; ++j) {
        double s = 0.0;
        for (int th = 0; th < threads; ++th) s += part[(size_t)th * N + j];
        o[j] = (float)s;
    }
    return out;
}

// out = x + fc2(gelu(fc1(layernorm(x)))); also returns h = layernorm(x), u = fc1(h), a = gelu(u), mean, rstd.
std::vector<torch::Tensor> mlp_forward(torch::Tensor x, torch::Tensor ln_w, torch::Tensor ln_b, double eps,
                                       torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    const int64_t D = x.size(-1), Hd = w1.size(0);
    TORCH_CHECK(ln_w.numel() == D && ln_b.numel() == D && w1.size(1) == D && b1.numel() == Hd &&
                w2.size(0) == D && w2.size(1) == Hd && b2.numel() == D, "shape mismatch");
    auto xc = x.contiguous();
    auto lw = ln_w.contiguous(), lb = ln_b.contiguous(), b1c = b1.contiguous(), b2c = b2.contiguous();
    const int64_t T = xc.numel() / D;
    auto h = torch::empty({T, D}, xc.options());
    auto mean = torch::empty({T}, xc.options()), rstd = torch::empty({T}, xc.options());
    const float *xp = xc.data_ptr<float>(), *lwp = lw.data_ptr<float>(), *lbp = lb.data_ptr<float>();
    float *hp = h.data_ptr<float>(), *mp = mean.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < T; ++r) {
        const float* xr = xp + r * D;
        double s = 0.0, v = 0.0;
        for (int64_t j = 0; j < D; ++j) s += xr[j];
        const double mu = s / D;
        for (int64_t j = 0; j < D; ++j) { const double d = xr[j] - mu; v += d * d; }
        const double rs = 1.0 / std::sqrt(v / D + eps);
        mp[r] = (float)mu;
        rp[r] = (float)rs;
        for (int64_t j = 0; j < D; ++j) hp[r * D + j] = (float)((xr[j] - mu) * rs * lwp[j] + lbp[j]);
    }
    auto u = mm_f32(h, transpose2d(w1));
    auto a = torch::empty_like(u);
    float *up = u.data_ptr<float>(), *ap = a.data_ptr<float>();
    const float* bb1 = b1c.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < Hd; ++j) {
            up[i * Hd + j] += bb1[j];
            ap[i * Hd + j] = (float)gelu_exact(up[i * Hd + j]);
        }
    auto out = mm_f32(a, transpose2d(w2));
    float* op = out.data_ptr<float>();
    const float* bb2 = b2c.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < D; ++j) op[i * D + j] = (float)((double)xp[i * D + j] + op[i * D + j] + bb2[j]);
    return {out.view(xc.sizes()), h, u, a, mean, rstd};
}

// The gradients of x, the norm's weight and bias, fc1's and fc2's weights and biases, from g = d out.
std::vector<torch::Tensor> mlp_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor ln_w, torch::Tensor mean,
                                        torch::Tensor rstd, torch::Tensor h, torch::Tensor u, torch::Tensor a,
                                        torch::Tensor w1, torch::Tensor w2) {
    const int64_t D = x.size(-1), Hd = w1.size(0), T = x.numel() / D;
    auto g = grad.contiguous().view({T, D});
    auto xc = x.contiguous();
    auto db2 = column_sums(g);
    auto dw2 = mm_f32(transpose2d(g), a);          // (D, T) @ (T, Hd)
    auto du = mm_f32(g, w2);                        // (T, D) @ (D, Hd): d a
    float* dup = du.data_ptr<float>();
    const float* up = u.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * Hd; ++i) dup[i] = (float)(dup[i] * gelu_grad(up[i]));
    auto db1 = column_sums(du);
    auto dw1 = mm_f32(transpose2d(du), h);          // (Hd, T) @ (T, D)
    auto dh = mm_f32(du, w1);                       // (T, Hd) @ (Hd, D)
    // LayerNorm's backward on dh, plus the residual's g
    auto lw = ln_w.contiguous();
    auto dx = torch::empty_like(xc);
    const float *dhp = dh.data_ptr<float>(), *gp = g.data_ptr<float>(), *xp = xc.data_ptr<float>();
    const float *lwp = lw.data_ptr<float>(), *mp = mean.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    float* dxp = dx.data_ptr<float>();
    const int threads = omp_get_max_threads();
    std::vector<double> pw((size_t)threads * D, 0.0), pb((size_t)threads * D, 0.0);
    #pragma omp parallel
    {
        double* tw = pw.data() + (size_t)omp_get_thread_num() * D;
        double* tb = pb.data() + (size_t)omp_get_thread_num() * D;
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < T; ++r) {
            const int64_t o = r * D;
            const double mu = mp[r], rs = rp[r];
            double s1 = 0.0, s2 = 0.0;
            for (int64_t j = 0; j < D; ++j) {
                const double xh = (xp[o + j] - mu) * rs, dv = (double)dhp[o + j] * lwp[j];
                s1 += dv;
                s2 += dv * xh;
                tw[j] += dhp[o + j] * xh;
                tb[j] += dhp[o + j];
            }
            s1 /= D;
            s2 /= D;
            for (int64_t j = 0; j < D; ++j) {
                const double xh = (xp[o + j] - mu) * rs;
                dxp[o + j] = (float)(gp[o + j] + rs * ((double)dhp[o + j] * lwp[j] - s1 - xh * s2));
            }
        }
    }
    auto dlw = torch::empty({D}, xc.options()), dlb = torch::empty({D}, xc.options());
    float *dlwp = dlw.data_ptr<float>(), *dlbp = dlb.data_ptr<float>();
    for (int64_t j = 0; j < D; ++j) {
        double sw = 0.0, sb = 0.0;
        for (int th = 0; th < threads; ++th) { sw += pw[(size_t)th * D + j]; sb += pb[(size_t)th * D + j]; }
        dlwp[j] = (float)sw;
        dlbp[j] = (float)sb;
    }
    return {dx, dlw, dlb, dw1, db1, dw2, db2};
}
"""

_ext = load_inline(name="kf_oracle_cpu_mlp_block_bwd", cpp_sources=[cpp_source], functions=["mlp_forward", "mlp_backward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


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
