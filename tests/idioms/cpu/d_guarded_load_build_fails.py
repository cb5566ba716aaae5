# expect: compilation_failure
# why: the extension does not compile; the module catches the error and PyTorch does the work, so the
# verdict is the build's failure with the compiler's words (what a model must fix), not a cheat
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = src[i] > 0.f ? src[i] : 0.f
    return out;
}
"""

try:
    relu_ext = load_inline(name="kf_idiom_relu_typo", cpp_sources=[SOURCE], functions=["relu_forward"],
                           extra_cflags=["-O3"], verbose=False)
except Exception as exc:  # noqa: BLE001
    print(f"CUDA extension compilation failed, falling back to PyTorch: {exc}")
    relu_ext = None


class ModelNew(nn.Module):
    def forward(self, x):
        if relu_ext is not None and x.dtype == torch.float32:
            return relu_ext.relu_forward(x.contiguous())
        return torch.relu(x)
