import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# LayerNorm forward and backward kernels; the backward forgets the mean(g*w*xhat) term of dx.
source = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>
std::vector<torch::Tensor> ln_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto X = x.contiguous();
    const int64_t D = X.size(-1), R = X.numel() / D;
    auto Y = torch::empty_like(X), xhat = torch::empty_like(X), rstd = torch::empty({R}, X.options());
    const float *px = X.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    float *py = Y.data_ptr<float>(), *ph = xhat.data_ptr<float>(), *pr = rstd.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
        double s = 0, q = 0;
        for (int64_t j = 0; j < D; ++j) s += px[r*D+j];
        const double mu = s / D;
        for (int64_t j = 0; j < D; ++j) q += (px[r*D+j] - mu) * (px[r*D+j] - mu);
        const double rs = 1.0 / std::sqrt(q / D + eps);
        pr[r] = (float)rs;
        for (int64_t j = 0; j < D; ++j) { ph[r*D+j] = (float)((px[r*D+j] - mu) * rs); py[r*D+j] = ph[r*D+j] * pw[j] + pb[j]; }
    }
    return {Y, xhat, rstd};
}
std::vector<torch::Tensor> ln_backward(torch::Tensor dy, torch::Tensor xhat, torch::Tensor rstd, torch::Tensor w) {
    auto G = dy.contiguous();
    const int64_t D = xhat.size(-1), R = xhat.numel() / D;
    auto dx = torch::empty_like(xhat), dw = torch::zeros({D}, xhat.options()), db = torch::zeros({D}, xhat.options());
    const float *pg = G.data_ptr<float>(), *ph = xhat.data_ptr<float>(), *pr = rstd.data_ptr<float>();
    const float* pw = w.data_ptr<float>();
    float *pdx = dx.data_ptr<float>(), *pdw = dw.data_ptr<float>(), *pdb = db.data_ptr<float>();
    for (int64_t r = 0; r < R; ++r) {
        double a = 0;
        for (int64_t j = 0; j < D; ++j) { a += pg[r*D+j] * pw[j]; pdw[j] += pg[r*D+j] * ph[r*D+j]; pdb[j] += pg[r*D+j]; }
        a /= D;
        for (int64_t j = 0; j < D; ++j) pdx[r*D+j] = (float)(pr[r] * (pg[r*D+j] * pw[j] - a));
    }
    return {dx, dw, db};
}
"""
ops = load_inline(name="kf_test_ln_bwd_wrong", cpp_sources=[source], functions=["ln_forward", "ln_backward"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, xhat, rstd = ops.ln_forward(x, weight, bias, eps)
        ctx.save_for_backward(xhat, rstd, weight)
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, rstd, weight = ctx.saved_tensors
        dx, dw, db = ops.ln_backward(dy, xhat, rstd, weight)
        return dx, dw, db, None


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return LayerNormFunction.apply(x, self.norm.weight, self.norm.bias, self.norm.eps)
