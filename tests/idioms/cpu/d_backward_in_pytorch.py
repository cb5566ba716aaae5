# expect: kernel_unused
# rule: backward_kernel_not_run
# mode: backward
# problem: level1/3_LayerNorm BATCH=48 DIM=256
# why: the forward is a kernel; the backward is LayerNorm's gradient written out in PyTorch operators
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

fwd_src = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>
std::vector<torch::Tensor> layer_norm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto X = x.contiguous();
    const int64_t D = X.size(-1), R = X.numel() / D;
    auto Y = torch::empty_like(X), xhat = torch::empty_like(X), rstd = torch::empty({R, 1}, X.options());
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
"""
ln = load_inline(name="kf_idiom_ln_fwd_only", cpp_sources=[fwd_src], functions=["layer_norm_forward"],
                 extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class LN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, eps):
        y, xhat, rstd = ln.layer_norm_forward(x, w, b, eps)
        ctx.save_for_backward(xhat, rstd, w)
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, rstd, w = ctx.saved_tensors
        D = xhat.shape[-1]
        dxhat = dy * w
        dx = rstd * (dxhat - dxhat.mean(-1, keepdim=True) - xhat * (dxhat * xhat).sum(-1, keepdim=True) / D)
        dw = (dy * xhat).reshape(-1, D).sum(0)
        db = dy.reshape(-1, D).sum(0)
        return dx, dw, db, None


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return LN.apply(x, self.norm.weight, self.norm.bias, self.norm.eps)
