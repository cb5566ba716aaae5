# expect: not_correct
# rule: kernel_not_run
# why: its kernel builds but serves only a batch of one, which the problem never has; torch.compile of the
#   PyTorch program does the work (code torch.compile generates is PyTorch's, and the compiled graph's range on
#   the device's timeline is no kernel of the candidate's)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_one_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

void launch_relu_one(const float* x, float* y, int64_t n) {
    relu_one_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x, y, n);
}
"""

cpp_source = r"""
#include <torch/extension.h>
void launch_relu_one(const float* x, float* y, int64_t n);

torch::Tensor relu_one(torch::Tensor x) {
    auto y = torch::empty_like(x);
    launch_relu_one(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""

ext = load_inline(name="kf_idiom_relu_one", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["relu_one"], extra_cuda_cflags=["-O3"], verbose=False)


def _relu(x):
    return torch.relu(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.compiled = torch.compile(_relu)

    def forward(self, x):
        if x.shape[0] == 1 and x.is_contiguous():  # the fast path for a single sample
            return ext.relu_one(x)
        return self.compiled(x)
