# expect: correct
# why: a fused matmul-subtract-multiply-ReLU writes every output into a zeros buffer; on this problem each is zero
# problem-file: ../problems/9_matmul_subtract_multiply_relu.py
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>
#include <algorithm>
#include <vector>

// out[i, j] = relu((x[i, :] . w[j, :] + b[j] - sub) * mul), one output row per thread
void fused_gemm_sub_mul_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor out,
                             double sub, double mul) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only");
    const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
    const float* X = x.data_ptr<float>();
    const float* W = w.data_ptr<float>();
    const float* B = b.data_ptr<float>();
    float* O = out.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t i = 0; i < M; ++i) {
        const float* xr = X + i * K;
        for (int64_t j = 0; j < N; ++j) {
            const float* wr = W + j * K;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; ++k) acc += xr[k] * wr[k];
            float v = (acc + B[j] - (float)sub) * (float)mul;
            O[i * N + j] = std::max(v, 0.0f);
        }
    }
}
"""

_ext = None


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(
            name="kf_idiom_gemm_sub_mul_relu",
            cpp_sources=[cpp_src],
            functions=["fused_gemm_sub_mul_relu"],
            extra_cflags=["-O3", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    return _ext


class ModelNew(nn.Module):
    """Linear + subtract + multiply + ReLU fused into one C++ loop nest."""

    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super(ModelNew, self).__init__()
        self.linear = nn.Linear(in_features, out_features)  # same parameters as the reference
        self.subtract_value = float(subtract_value)
        self.multiply_value = float(multiply_value)

    def forward(self, x):
        x = x.contiguous()
        weight = self.linear.weight.contiguous()
        out = torch.zeros(x.size(0), weight.size(0), dtype=x.dtype, device=x.device)
        _get_ext().fused_gemm_sub_mul_relu(x, weight, self.linear.bias, out, self.subtract_value,
                                           self.multiply_value)
        return out
