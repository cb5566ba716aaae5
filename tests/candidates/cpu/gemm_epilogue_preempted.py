# A library GEMM with the candidate's own bias + GELU epilogue (about a third of the work), whose every other
# call is held up 200 ms inside its kernel: what the OS does to a thread descheduled inside an OpenMP region on a
# busy machine, made to happen on cue. The outputs are right; only the time the epilogue seems to take moves.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <chrono>
#include <cmath>

torch::Tensor bias_gelu(torch::Tensor y, torch::Tensor bias, int64_t held_up_us) {
    TORCH_CHECK(y.dim() == 2 && bias.dim() == 1 && y.size(1) == bias.size(0), "bias_gelu: bad shapes");
    auto out = y.contiguous().clone();
    auto b = bias.contiguous();
    const int64_t rows = out.size(0), cols = out.size(1);
    float* po = out.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(held_up_us);
    while (std::chrono::steady_clock::now() < until) {}
    #pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const float v = po[r * cols + c] + pb[c];
            po[r * cols + c] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
        }
    }
    return out;
}
"""

ext = load_inline(name="kf_gemm_epilogue_preempted", cpp_sources=[src], functions=["bias_gelu"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = torch.matmul(x, self.linear.weight.t())
        return ext.bias_gelu(y, self.linear.bias, 200_000 if self.calls % 3 == 0 else 0)
