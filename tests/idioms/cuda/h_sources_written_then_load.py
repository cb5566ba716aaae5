# expect: correct
# why: writes its .cu and .cpp files next to each other in a temporary directory and builds them with
#   cpp_extension.load, after choosing the CUDA arch list (seen in published KernelBench kernels)
import gc
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

CUDA_FILE = r"""
#include <cuda_runtime.h>
#include <cstdint>
#include "relu_launch.h"

__global__ void relu_files_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) y[i] = fmaxf(x[i], 0.0f);
}

void launch_relu(const float* x, float* y, int64_t n) {
    int blocks = (int)((n + 255) / 256);
    if (blocks > 8192) blocks = 8192;
    relu_files_kernel<<<blocks, 256>>>(x, y, n);
}
"""

HEADER_FILE = r"""
#pragma once
#include <cstdint>
void launch_relu(const float* x, float* y, int64_t n);
"""

CPP_FILE = r"""
#include <torch/extension.h>
#include "relu_launch.h"

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    launch_relu(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel());
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("relu_forward", &relu_forward, "ReLU (CUDA)");
}
"""


def _write_sources():
    src_dir = tempfile.mkdtemp(prefix="relu_cuda_")
    paths = {}
    for name, text in (("relu_launch.h", HEADER_FILE), ("relu_kernel.cu", CUDA_FILE), ("relu_ext.cpp", CPP_FILE)):
        paths[name] = os.path.join(src_dir, name)
        with open(paths[name], "w") as f:
            f.write(text)
    return src_dir, paths


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        src_dir, paths = _write_sources()
        self.ext = load(name="kf_idiom_relu_cuda_files", sources=[paths["relu_ext.cpp"], paths["relu_kernel.cu"]],
                        extra_include_paths=[src_dir], extra_cuda_cflags=["-O3"], verbose=False)
        gc.collect()

    def forward(self, x):
        return self.ext.relu_forward(x)
