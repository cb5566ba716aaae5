# expect: correct
# mode: backward
# problem: level2/4_RMSNorm_SiLUGate BATCH=32 DIM=128
# why: the backward kernel recomputes the row's rms and the gate from the saved inputs instead of saving them
#      (activation checkpointing in one kernel); the weight's gradient comes back per row and is summed in PyTorch
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>
static inline float sigm(float v) { return 1.f / (1.f + std::exp(-v)); }

torch::Tensor gated_rms_fwd(torch::Tensor x, torch::Tensor g, torch::Tensor w, double eps) {
    auto X = x.contiguous(), Gt = g.contiguous();
    const int64_t D = X.size(-1), R = X.numel() / D;
    auto out = torch::empty_like(X);
    const float *px = X.data_ptr<float>(), *pg = Gt.data_ptr<float>(), *pw = w.data_ptr<float>();
    float* po = out.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
        double ss = 0; for (int64_t j = 0; j < D; ++j) ss += (double)px[r*D+j] * px[r*D+j];
        const float inv = (float)(1.0 / std::sqrt(ss / D + eps));
        for (int64_t j = 0; j < D; ++j) { float gv = pg[r*D+j]; po[r*D+j] = px[r*D+j] * inv * pw[j] * (gv * sigm(gv)); }
    }
    return out;
}

// returns dx, dg and the weight gradient per row (R x D)
std::vector<torch::Tensor> gated_rms_bwd(torch::Tensor dy, torch::Tensor x, torch::Tensor g, torch::Tensor w,
                                         double eps) {
    auto DY = dy.contiguous(), X = x.contiguous(), Gt = g.contiguous();
    const int64_t D = X.size(-1), R = X.numel() / D;
    auto dx = torch::empty_like(X), dg = torch::empty_like(X), dw_rows = torch::empty_like(X);
    const float *pdy = DY.data_ptr<float>(), *px = X.data_ptr<float>(), *pg = Gt.data_ptr<float>();
    const float* pw = w.data_ptr<float>();
    float *pdx = dx.data_ptr<float>(), *pdg = dg.data_ptr<float>(), *pdw = dw_rows.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
        const int64_t o = r * D;
        double ss = 0; for (int64_t j = 0; j < D; ++j) ss += (double)px[o+j] * px[o+j];
        const double inv = 1.0 / std::sqrt(ss / D + eps);
        double dot = 0;  // sum_j dy * w * silu(g) * x
        for (int64_t j = 0; j < D; ++j) {
            const float s = sigm(pg[o+j]), silu = pg[o+j] * s;
            const double u = (double)pdy[o+j] * pw[j] * silu;   // d out / d (x * inv)
            dot += u * px[o+j];
            pdw[o+j] = (float)(pdy[o+j] * px[o+j] * inv * silu);
            pdg[o+j] = (float)(pdy[o+j] * px[o+j] * inv * pw[j] * (s * (1.f + pg[o+j] * (1.f - s))));
        }
        for (int64_t j = 0; j < D; ++j) {
            const float silu = pg[o+j] * sigm(pg[o+j]);
            const double u = (double)pdy[o+j] * pw[j] * silu;
            pdx[o+j] = (float)(inv * u - inv * inv * inv * px[o+j] * dot / D);
        }
    }
    return {dx, dg, dw_rows};
}
"""
_gate = load_inline(name="kf_idiom_rms_gate_bwd", cpp_sources=[CPP], functions=["gated_rms_fwd", "gated_rms_bwd"],
                    extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class _GatedRMS(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g, w, eps):
        ctx.eps = eps
        ctx.save_for_backward(x, g, w)
        return _gate.gated_rms_fwd(x, g, w.contiguous(), eps)

    @staticmethod
    def backward(ctx, dy):
        x, g, w = ctx.saved_tensors
        dx, dg, dw_rows = _gate.gated_rms_bwd(dy, x, g, w.contiguous(), ctx.eps)
        return dx, dg, dw_rows.reshape(-1, w.numel()).sum(0), None


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x, g):
        return _GatedRMS.apply(x, g, self.weight, self.eps)
