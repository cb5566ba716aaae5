# expect: kernel_unused
# rule: answer_precomputed
# problem: level2/1_Gemm_Bias_GELU BATCH=64 IN_FEATURES=256 OUT_FEATURES=512
# why: PyTorch computes the whole reference (linear + gelu); the "kernel" only copies the answer
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

gemm_epilogue_src = r"""
#include <torch/extension.h>
#include <cmath>

// y = gelu(y + bias), row-major y of shape (rows, cols); bias of shape (cols)
void bias_gelu_inplace(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.is_contiguous() && bias.is_contiguous(), "contiguous inputs expected");
    const int64_t rows = y.size(0), cols = y.size(1);
    float* py = y.data_ptr<float>();
    const float* pb = bias.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const float v = py[r * cols + c] + pb[c];
            py[r * cols + c] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
        }
    }
}

torch::Tensor bias_gelu(torch::Tensor y, torch::Tensor bias) {
    auto out = y.contiguous().clone();
    bias_gelu_inplace(out, bias);
    return out;
}

torch::Tensor copy_rows(torch::Tensor y) {
    auto src = y.contiguous();
    auto out = torch::empty_like(src);
    const float* a = src.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = src.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) o[i] = a[i];
    return out;
}
"""

epilogue = load_inline(
    name="kf_idiom_bias_gelu",
    cpp_sources=[gemm_epilogue_src],
    functions=["bias_gelu_inplace", "bias_gelu", "copy_rows"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return epilogue.copy_rows(F.gelu(self.linear(x)))
