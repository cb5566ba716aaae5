import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# CUDA part: plain CUDA C++ with no torch headers (it compiles much faster). A kernel and a launcher
# that takes raw pointers and returns nullptr on success or the CUDA error string.
cuda_source = r"""
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

__global__ void add_scale_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                 float* __restrict__ out, int64_t n, int64_t n4, float scale) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    // Vectorised body: 16-byte loads and stores, grid-stride loop.
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (int64_t i = start; i < n4; i += stride) {
        const float4 x = a4[i], y = b4[i];
        o4[i] = make_float4((x.x + y.x) * scale, (x.y + y.y) * scale, (x.z + y.z) * scale, (x.w + y.w) * scale);
    }
    // Scalar tail (all of it when the pointers are not 16-byte aligned).
    for (int64_t i = 4 * n4 + start; i < n; i += stride) out[i] = (a[i] + b[i]) * scale;
}

const char* add_scale_launch(const float* a, const float* b, float* out, int64_t n, float scale) {
    if (n == 0) return nullptr;
    const bool aligned = ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                           reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    const int threads = 256;
    const int64_t work = n4 > 0 ? n4 : n;
    const int blocks = (int)std::min<int64_t>((work + threads - 1) / threads, 65535);
    add_scale_kernel<<<blocks, threads>>>(a, b, out, n, n4, scale);  // default stream
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

# C++ part (load_inline prefixes it with #include <torch/extension.h>): checks, allocation, launch.
cpp_source = r"""
const char* add_scale_launch(const float* a, const float* b, float* out, int64_t n, float scale);

torch::Tensor add_scale(torch::Tensor a, torch::Tensor b, double scale) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "float32 expected");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(ac);  // every element is written by the kernel
    const char* err = add_scale_launch(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
                                       ac.numel(), static_cast<float>(scale));
    TORCH_CHECK(err == nullptr, "add_scale kernel failed: ", err);
    return out;
}
"""

add_scale_ext = load_inline(
    name="add_scale_cuda_ext",
    cpp_sources=[cpp_source],
    cuda_sources=[cuda_source],
    functions=["add_scale"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same constructor and forward signature as Model; the work happens in the CUDA kernel."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_scale_ext.add_scale(a, b, self.scale)
