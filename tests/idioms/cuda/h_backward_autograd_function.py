# expect: correct
# mode: backward
# why: forward and backward CUDA kernels behind a torch.autograd.Function, the extension built in __init__ and kept
#      on the module, the Function reaching it through ctx
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cuda = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_forward_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t size) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) out[idx] = fmaxf(in[idx], 0.0f);
}

__global__ void relu_backward_kernel(const float* __restrict__ grad_out, const float* __restrict__ in,
                                     float* __restrict__ grad_in, int64_t size) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) grad_in[idx] = in[idx] > 0.0f ? grad_out[idx] : 0.0f;
}

void relu_forward_cuda(const float* in, float* out, int64_t size) {
    const int threads = 512;
    relu_forward_kernel<<<(unsigned)((size + threads - 1) / threads), threads>>>(in, out, size);
}

void relu_backward_cuda(const float* g, const float* in, float* gi, int64_t size) {
    const int threads = 512;
    relu_backward_kernel<<<(unsigned)((size + threads - 1) / threads), threads>>>(g, in, gi, size);
}
"""

relu_cpp = r"""
void relu_forward_cuda(const float* in, float* out, int64_t size);
void relu_backward_cuda(const float* g, const float* in, float* gi, int64_t size);

torch::Tensor relu_forward(torch::Tensor input) {
    auto x = input.contiguous();
    auto out = torch::empty_like(x);
    relu_forward_cuda(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}

torch::Tensor relu_backward(torch::Tensor grad_output, torch::Tensor input) {
    auto g = grad_output.contiguous();
    auto gi = torch::empty_like(g);
    relu_backward_cuda(g.data_ptr<float>(), input.data_ptr<float>(), gi.data_ptr<float>(), g.numel());
    return gi;
}
"""


class ReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, module):
        ctx.module = module
        ctx.save_for_backward(input)
        return module.relu_forward(input)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        return ctx.module.relu_backward(grad_output, input.contiguous()), None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu_ext = load_inline(name="kf_idiom_cuda_relu_bwd", cpp_sources=[relu_cpp], cuda_sources=[relu_cuda],
                                    functions=["relu_forward", "relu_backward"], extra_cuda_cflags=["-O3"])

    def forward(self, x):
        return ReLUFunction.apply(x, self.relu_ext)
