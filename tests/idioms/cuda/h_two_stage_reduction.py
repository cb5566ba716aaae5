# expect: correct
# problem: level1/5_SumReduction BATCH=16 DIM1=1024 DIM2=256
# why: the kernel sums blocks of 128 rows; torch.sum adds up the 8 partial sums per column
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <cuda_runtime.h>
__global__ void block_sums(const float* x, float* out, int B, int N, int D, int rows, int P) {
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    int p = blockIdx.y, b = blockIdx.z;
    if (d >= D) return;
    float acc = 0.f;
    int end = min(N, (p + 1) * rows);
    for (int n = p * rows; n < end; ++n) acc += x[((long)b * N + n) * D + d];
    out[((long)b * P + p) * D + d] = acc;
}
void launch_block_sums(const float* x, float* out, int B, int N, int D, int rows, int P) {
    dim3 grid((D + 127) / 128, P, B);
    block_sums<<<grid, 128>>>(x, out, B, N, D, rows, P);
}
"""
cpp_src = r"""
#include <torch/extension.h>
void launch_block_sums(const float* x, float* out, int B, int N, int D, int rows, int P);
torch::Tensor partial_sums(torch::Tensor x, int64_t rows) {
    auto xc = x.contiguous();
    int B = xc.size(0), N = xc.size(1), D = xc.size(2), P = (N + rows - 1) / rows;
    auto out = torch::empty({B, P, D}, xc.options());
    launch_block_sums(xc.data_ptr<float>(), out.data_ptr<float>(), B, N, D, (int)rows, P);
    return out;
}
"""
reduce_ext = load_inline(name="kf_idiom_cuda_block_sums", cpp_sources=cpp_src, cuda_sources=cuda_src,
                         functions=["partial_sums"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return reduce_ext.partial_sums(x, 128).sum(dim=1, keepdim=True)
