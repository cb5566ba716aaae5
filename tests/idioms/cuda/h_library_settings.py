# expect: correct
# why: reads TORCH_EXTENSIONS_VERBOSE to choose load_inline's verbosity, lets cuDNN autotune, and tunes torch's
# why: compiler configuration for its own use; the references run with the harness's settings
import os

import torch
import torch._inductor.config
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

torch.backends.cudnn.benchmark = True
torch._inductor.config.coordinate_descent_tuning = True
torch._inductor.config.triton.unique_kernel_names = True

_VERBOSE = os.environ.get("TORCH_EXTENSIONS_VERBOSE", "0") not in ("", "0")

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_vec4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = x[i];
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        y[i] = v;
    }
}

__global__ void relu_tail(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
    int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_fwd(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel(), n4 = n / 4;
    if (n4 > 0) {
        relu_vec4<<<(unsigned)((n4 + 255) / 256), 256>>>(reinterpret_cast<const float4*>(xc.data_ptr<float>()),
                                                         reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
    }
    if (n - 4 * n4 > 0) {
        relu_tail<<<1, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), 4 * n4, n);
    }
    return y;
}
"""

relu_mod = load_inline(
    name="kf_idiom_cuda_relu_vec4",
    cpp_sources="torch::Tensor relu_fwd(torch::Tensor x);",
    cuda_sources=cuda_src,
    functions=["relu_fwd"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=_VERBOSE,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_mod.relu_fwd(x)
