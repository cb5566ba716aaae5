# expect: correct
# problem: level1/5_SumReduction BATCH=4 DIM1=512 DIM2=64
# why: the kernel reduces blocks of rows; torch.sum finishes over the few partial sums
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
// x: (B, N, D) -> partial sums (B, ceil(N / rows), D), each over `rows` consecutive rows
torch::Tensor block_sums(torch::Tensor x, int64_t rows) {
    auto xc = x.contiguous();
    const int64_t B = xc.size(0), N = xc.size(1), D = xc.size(2), P = (N + rows - 1) / rows;
    auto out = torch::zeros({B, P, D}, xc.options());
    const float* a = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    #pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t p = 0; p < P; ++p)
            for (int64_t n = p * rows; n < std::min(N, (p + 1) * rows); ++n)
                for (int64_t d = 0; d < D; ++d)
                    o[(b * P + p) * D + d] += a[(b * N + n) * D + d];
    return out;
}
"""
partial = load_inline(name="kf_idiom_block_sums", cpp_sources=[source], functions=["block_sums"],
                      extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return partial.block_sums(x, 128).sum(dim=1, keepdim=True)
