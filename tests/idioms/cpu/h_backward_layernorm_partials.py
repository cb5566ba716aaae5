# expect: correct
# mode: backward
# problem: level1/3_LayerNorm BATCH=48 DIM=256
# why: forward and backward kernels behind a torch.autograd.Function; the backward kernel writes dx and per-block
#      partial sums of the weight's and bias's gradients, which torch.sum finishes (a two-stage reduction)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ln_source = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>

std::vector<torch::Tensor> ln_fwd(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto X = x.contiguous();
    const int64_t D = X.size(-1), R = X.numel() / D;
    auto Y = torch::empty_like(X);
    auto mean = torch::empty({R}, X.options());
    auto rstd = torch::empty({R}, X.options());
    const float *px = X.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    float *py = Y.data_ptr<float>(), *pm = mean.data_ptr<float>(), *pr = rstd.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
        const float* row = px + r * D;
        double s = 0, q = 0;
        for (int64_t j = 0; j < D; ++j) s += row[j];
        double mu = s / D;
        for (int64_t j = 0; j < D; ++j) q += (row[j] - mu) * (row[j] - mu);
        double rs = 1.0 / std::sqrt(q / D + eps);
        pm[r] = (float)mu; pr[r] = (float)rs;
        for (int64_t j = 0; j < D; ++j) py[r * D + j] = (float)((row[j] - mu) * rs) * pw[j] + pb[j];
    }
    return {Y, mean, rstd};
}

// dx per row; dw, db as partial sums over blocks of ROWS rows (finished by the caller)
std::vector<torch::Tensor> ln_bwd(torch::Tensor g, torch::Tensor x, torch::Tensor w, torch::Tensor mean,
                                  torch::Tensor rstd) {
    const int64_t ROWS = 16;
    auto G = g.contiguous(); auto X = x.contiguous();
    const int64_t D = X.size(-1), R = X.numel() / D, P = (R + ROWS - 1) / ROWS;
    auto dX = torch::empty_like(X);
    auto dWp = torch::zeros({P, D}, X.options());
    auto dBp = torch::zeros({P, D}, X.options());
    const float *pg = G.data_ptr<float>(), *px = X.data_ptr<float>(), *pw = w.data_ptr<float>();
    const float *pm = mean.data_ptr<float>(), *pr = rstd.data_ptr<float>();
    float *pdx = dX.data_ptr<float>(), *pdw = dWp.data_ptr<float>(), *pdb = dBp.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t p = 0; p < P; ++p) {
        for (int64_t r = p * ROWS; r < std::min(R, (p + 1) * ROWS); ++r) {
            const float *gr = pg + r * D, *xr = px + r * D;
            double a = 0, c = 0;  // mean(g*w), mean(g*w*xhat)
            for (int64_t j = 0; j < D; ++j) {
                double xh = (xr[j] - pm[r]) * pr[r];
                a += gr[j] * pw[j]; c += gr[j] * pw[j] * xh;
                pdw[p * D + j] += (float)(gr[j] * xh); pdb[p * D + j] += gr[j];
            }
            a /= D; c /= D;
            for (int64_t j = 0; j < D; ++j) {
                double xh = (xr[j] - pm[r]) * pr[r];
                pdx[r * D + j] = (float)(pr[r] * (gr[j] * pw[j] - a - xh * c));
            }
        }
    }
    return {dX, dWp, dBp};
}
"""
ln_ext = load_inline(name="kf_idiom_ln_bwd", cpp_sources=[ln_source], functions=["ln_fwd", "ln_bwd"],
                     extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class LayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = ln_ext.ln_fwd(x, weight.contiguous(), bias.contiguous(), eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw_part, db_part = ln_ext.ln_bwd(dy, x, weight.contiguous(), mean, rstd)
        return dx, dw_part.sum(0), db_part.sum(0), None


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)  # same parameters, same names: norm.weight, norm.bias

    def forward(self, x):
        return LayerNormFn.apply(x, self.norm.weight, self.norm.bias, self.norm.eps)
