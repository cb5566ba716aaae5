# expect: correct
# why: writes its C++ source to a temporary directory and builds it with cpp_extension.load, after setting the
#   build's job count and with a build directory under ~/.cache (seen in published KernelBench kernels)
import gc
import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

os.environ.setdefault("MAX_JOBS", "2")

RELU_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor input) {
    TORCH_CHECK(input.scalar_type() == torch::kFloat32, "relu_forward expects float32");
    auto x = input.contiguous();
    auto out = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const int64_t n = x.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] > 0.0f ? src[i] : 0.0f;
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("relu_forward", &relu_forward, "ReLU (CPU)");
}
"""


def _build_extension():
    src_dir = tempfile.mkdtemp(prefix="relu_ext_")
    src_path = os.path.join(src_dir, "relu_ext.cpp")
    with open(src_path, "w") as f:
        f.write(RELU_SOURCE)
    build_dir = os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions", "kf_idiom_relu_files")
    os.makedirs(build_dir, exist_ok=True)
    module = load(name="kf_idiom_relu_files", sources=[src_path], extra_cflags=["-O3", "-fopenmp"],
                  extra_ldflags=["-fopenmp"], build_directory=build_dir, verbose=False)
    gc.collect()  # the build's temporaries
    return module


relu_ext = _build_extension()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = relu_ext

    def forward(self, x):
        return self.ext.relu_forward(x)
