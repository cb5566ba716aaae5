# expect: correct
# why: the class is named after what it does and bound at the end with `ModelNew = ReLUCuda`
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_kernel_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t size) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        float v = in[idx];
        out[idx] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor relu_cuda(torch::Tensor input) {
    TORCH_CHECK(input.is_cuda(), "input must be a CUDA tensor");
    auto x = input.contiguous();
    auto out = torch::empty_like(x);
    int64_t size = x.numel();
    const int block_size = 256;
    const int num_blocks = (int)((size + block_size - 1) / block_size);
    relu_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""

relu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor input);"

relu_module = load_inline(
    name="kf_idiom_cuda_relu_alias",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_kernel_source,
    functions=["relu_cuda"],
    verbose=False,
    extra_cuda_cflags=["-O3"],
)


class ReLUCuda(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.relu_module = relu_module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu_module.relu_cuda(x)


ModelNew = ReLUCuda
