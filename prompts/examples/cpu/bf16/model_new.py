import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# bf16 storage, fp32 arithmetic: every value is widened to float on load (static_cast<float>), the dot
# products accumulate in float, and each output is rounded to bf16 once, when it is stored.
cpp_source = r"""
#include <omp.h>

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16 &&
                b.scalar_type() == torch::kBFloat16, "bfloat16 x, weight and bias expected");
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && b.numel() == w.size(0), "shape mismatch");
    auto xc = x.contiguous();
    auto wc = w.contiguous();  // nn.Linear's (out, in): row j of W is contiguous, like row i of x
    auto bc = b.contiguous();
    const int64_t M = xc.size(0), K = xc.size(1), N = wc.size(0);
    auto out = torch::empty({M, N}, xc.options());  // bf16, every element written below
    const at::BFloat16* px = xc.data_ptr<at::BFloat16>();
    const at::BFloat16* pw = wc.data_ptr<at::BFloat16>();
    const at::BFloat16* pb = bc.data_ptr<at::BFloat16>();
    at::BFloat16* po = out.data_ptr<at::BFloat16>();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            const at::BFloat16* xr = px + i * K;
            const at::BFloat16* wr = pw + j * K;
            float acc = static_cast<float>(pb[j]);
            for (int64_t k = 0; k < K; ++k) acc += static_cast<float>(xr[k]) * static_cast<float>(wr[k]);
            po[i * N + j] = static_cast<at::BFloat16>(acc > 0.f ? acc : 0.f);
        }
    }
    return out;
}
"""

linear_relu_ext = load_inline(
    name="linear_relu_bf16_ext",
    cpp_sources=[cpp_source],
    functions=["linear_relu"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same constructor and parameters as Model (the harness casts them to bf16); the work is in C++."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear_relu_ext.linear_relu(x, self.linear.weight, self.linear.bias)
