# Hand-written solution (kforge's oracle, not an LLM): ReLU's forward and backward as C++ kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
// y = max(x, 0); the backward passes the upstream gradient where the input was positive (as torch.relu's: 0 at 0).
torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = xc.numel();
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}

torch::Tensor relu_backward(torch::Tensor grad, torch::Tensor y) {
    auto gc = grad.contiguous();
    auto yc = y.contiguous();
    TORCH_CHECK(gc.scalar_type() == torch::kFloat32 && gc.numel() == yc.numel(), "float32 of y's size expected");
    auto dx = torch::empty_like(yc);
    const float* g = gc.data_ptr<float>();
    const float* yv = yc.data_ptr<float>();
    float* d = dx.data_ptr<float>();
    const int64_t n = yc.numel();
    #pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = yv[i] > 0.f ? g[i] : 0.f;
    return dx;
}
"""

_ext = load_inline(name="kf_oracle_cpu_relu_bwd", cpp_sources=[cpp_source], functions=["relu_forward", "relu_backward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = _ext.relu_forward(x)
        ctx.save_for_backward(y)  # y > 0 exactly where x > 0: the output is all the backward needs
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _ext.relu_backward(grad, y)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ReLUFunction.apply(x)
