# expect: compilation_failure
# why: the C++ defines its own PYBIND11_MODULE and also asks load_inline for `functions`, so the module is
# defined twice and the build fails (as in published RL-written kernels); the candidate catches it and
# PyTorch does the work: the verdict is the build's failure with the compiler's words
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    relu_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor relu_cuda(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("relu_cuda", &relu_cuda, "ReLU (CUDA)");
}
"""

relu_ext = None
try:
    if torch.cuda.is_available():
        relu_ext = load_inline(name="kf_idiom_cuda_relu_twice", cpp_sources=cpp_source, cuda_sources=cuda_source,
                               functions=["relu_cuda"], verbose=False)
except Exception as e:  # noqa: BLE001
    print(f"CUDA extension compilation failed, falling back to PyTorch implementation: {e}")


class ModelNew(nn.Module):
    def forward(self, x):
        if relu_ext is not None and x.is_cuda and x.dtype == torch.float32:
            try:
                return relu_ext.relu_cuda(x.contiguous())
            except Exception:  # noqa: BLE001
                pass
        return torch.relu(x)
