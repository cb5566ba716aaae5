# expect: not_correct
# problem: level1/1_ReLU BATCH=2048 DIM=65536
# why: waits for its stream only on a branch the problem's inputs never take, so the output is returned
#   before the work is done; the static check sees a join and leaves it to the run, which must catch it
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_side_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) y[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_side(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const long n = x.numel();
    relu_side_kernel<<<1024, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
                                                                           y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="kf_idiom_relu_side_dead", cpp_sources="torch::Tensor relu_side(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_side"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, x):
        with torch.cuda.stream(self.stream):
            y = ext.relu_side(x.contiguous())
        if x.dim() > 4:  # never, for this problem
            torch.cuda.current_stream().wait_stream(self.stream)
        return y
