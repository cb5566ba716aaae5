# expect: kernel_unused
# rule: backward_kernel_not_run
# mode: backward
# why: a CUDA forward kernel and a backward written in PyTorch's operators
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
void relu_launch(const float* x, float* y, int64_t n) { relu_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x, y, n); }
"""
cpp_source = r"""
void relu_launch(const float* x, float* y, int64_t n);
torch::Tensor relu_cuda(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    relu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel());
    return y;
}
"""
relu_mod = load_inline(name="kf_idiom_cuda_relu_fwd_only", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                       functions=["relu_cuda"], extra_cuda_cflags=["-O3"])


class ReluFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = relu_mod.relu_cuda(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (y > 0).float()


class ModelNew(nn.Module):
    def forward(self, x):
        return ReluFn.apply(x)
