import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Forward and backward kernels with OpenMP threads; load_inline adds #include <torch/extension.h>.
cpp_source = r"""
#include <omp.h>
#include <vector>

// out[i, j] = (a[i, j] + b[i, j]) * w[j]
torch::Tensor add_scale_forward(torch::Tensor a, torch::Tensor b, torch::Tensor w) {
    TORCH_CHECK(a.sizes() == b.sizes() && a.size(-1) == w.numel(), "shape mismatch");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "float32 expected");
    auto ac = a.contiguous(), bc = b.contiguous(), wc = w.contiguous();
    auto out = torch::empty_like(ac);  // every element is written below
    const int64_t cols = wc.numel(), rows = ac.numel() / cols;
    const float *pa = ac.data_ptr<float>(), *pb = bc.data_ptr<float>(), *pw = wc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) po[i * cols + j] = (pa[i * cols + j] + pb[i * cols + j]) * pw[j];
    return out;
}

// d a = d b = g * w; d w[j] = sum over rows of g * (a + b), each thread summing its rows, the threads' sums
// added at the end (a reduction over the batch, as every weight's gradient is).
std::vector<torch::Tensor> add_scale_backward(torch::Tensor g, torch::Tensor a, torch::Tensor b, torch::Tensor w) {
    auto gc = g.contiguous(), ac = a.contiguous(), bc = b.contiguous(), wc = w.contiguous();
    const int64_t cols = wc.numel(), rows = gc.numel() / cols;
    auto dab = torch::empty_like(gc);
    auto dw = torch::empty_like(wc);
    const float *pg = gc.data_ptr<float>(), *pa = ac.data_ptr<float>(), *pb = bc.data_ptr<float>();
    const float* pw = wc.data_ptr<float>();
    float* pd = dab.data_ptr<float>();
    const int threads = omp_get_max_threads();
    std::vector<double> partial((size_t)threads * cols, 0.0);
    #pragma omp parallel
    {
        double* mine = partial.data() + (size_t)omp_get_thread_num() * cols;
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
                const int64_t k = i * cols + j;
                pd[k] = pg[k] * pw[j];
                mine[j] += (double)pg[k] * (pa[k] + pb[k]);
            }
    }
    float* pdw = dw.data_ptr<float>();
    for (int64_t j = 0; j < cols; ++j) {
        double s = 0.0;
        for (int t = 0; t < threads; ++t) s += partial[(size_t)t * cols + j];
        pdw[j] = (float)s;
    }
    return {dab, dw};
}
"""

add_scale_ext = load_inline(
    name="add_scale_train_ext",
    cpp_sources=[cpp_source],
    functions=["add_scale_forward", "add_scale_backward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class AddScale(torch.autograd.Function):
    """Autograd calls forward, then backward with the gradient of the output; both run our kernels."""

    @staticmethod
    def forward(ctx, a, b, weight):
        ctx.save_for_backward(a, b, weight)  # what the backward needs (recomputing a + b there saves memory)
        return add_scale_ext.add_scale_forward(a, b, weight)

    @staticmethod
    def backward(ctx, grad_out):
        a, b, weight = ctx.saved_tensors
        d_ab, d_weight = add_scale_ext.add_scale_backward(grad_out, a, b, weight)
        return d_ab, d_ab, d_weight  # one gradient per argument of forward, in order


class ModelNew(nn.Module):
    """Same constructor, forward signature and parameters (same names) as Model; the work happens in the kernels."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return AddScale.apply(a, b, self.weight)
