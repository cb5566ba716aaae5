# expect: correct
# mode: backward
# problem: level1/4_Matmul M=64 K=96 N=80
# why: one GEMM kernel serves the forward and both gradients (dA = dC B^T, dB = A^T dC), fed transposed copies
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gemm_src = r"""
#include <torch/extension.h>
// C = A @ B, row-major, blocked over k for cache reuse
torch::Tensor gemm(torch::Tensor A, torch::Tensor B) {
    auto a = A.contiguous(), b = B.contiguous();
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::zeros({M, N}, a.options());
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* pc = c.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k) {
            const float aik = pa[i * K + k];
            for (int64_t j = 0; j < N; ++j) pc[i * N + j] += aik * pb[k * N + j];
        }
    return c;
}
"""
mm = load_inline(name="kf_idiom_gemm_bwd", cpp_sources=[gemm_src], functions=["gemm"],
                 extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class MatMulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, B):
        ctx.save_for_backward(A, B)
        return mm.gemm(A, B)

    @staticmethod
    def backward(ctx, grad_C):
        A, B = ctx.saved_tensors
        grad_A = mm.gemm(grad_C, B.t().contiguous())
        grad_B = mm.gemm(A.t().contiguous(), grad_C)
        return grad_A, grad_B


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return MatMulFunction.apply(A, B)
