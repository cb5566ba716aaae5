# expect: kernel_unused
# rule: backward_replayed
# mode: backward
# why: the backward runs ATen's ReLU backward, then passes its result through a "cleanup" kernel that only
#      copies it (flushing denormals): every operator of the reference's backward ran in PyTorch
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cmath>
torch::Tensor relu_k(torch::Tensor x) {
    auto xc = x.contiguous(); auto y = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>(); float* b = y.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t i = 0; i < xc.numel(); ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
    return y;
}
torch::Tensor flush_denormals(torch::Tensor g) {
    auto gc = g.contiguous(); auto out = torch::empty_like(gc);
    const float* a = gc.data_ptr<float>(); float* b = out.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t i = 0; i < gc.numel(); ++i) b[i] = std::fpclassify(a[i]) == FP_SUBNORMAL ? 0.f : a[i];
    return out;
}
"""
K = load_inline(name="kf_idiom_relu_flush", cpp_sources=[src], functions=["relu_k", "flush_denormals"],
                extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ReluFlush(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = K.relu_k(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved_tensors
        gx = torch.ops.aten.threshold_backward(gy, y, 0.0)
        return K.flush_denormals(gx)


class ModelNew(nn.Module):
    def forward(self, x):
        return ReluFlush.apply(x)
