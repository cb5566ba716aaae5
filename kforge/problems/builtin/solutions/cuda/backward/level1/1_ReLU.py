# Hand-written solution (kforge's oracle, not an LLM): ReLU's forward and backward as CUDA kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>
#include <algorithm>

static const char* launch_status() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

__device__ __forceinline__ float relu1(float v) { return v > 0.f ? v : 0.f; }
__device__ __forceinline__ float pass1(float g, float y) { return y > 0.f ? g : 0.f; }

// y = max(x, 0): grid-stride loop over float4s, then the scalar tail (everything when not 16-byte aligned).
__global__ void relu_fwd_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = start; i < n4; i += stride) {
        const float4 v = x4[i];
        y4[i] = make_float4(relu1(v.x), relu1(v.y), relu1(v.z), relu1(v.w));
    }
    for (int64_t i = 4 * n4 + start; i < n; i += stride) y[i] = relu1(x[i]);
}

// dx = g where y > 0 (exactly where x > 0), else 0, as torch.relu's backward
__global__ void relu_bwd_kernel(const float* __restrict__ g, const float* __restrict__ y, float* __restrict__ dx,
                                int64_t n, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* g4 = reinterpret_cast<const float4*>(g);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    float4* d4 = reinterpret_cast<float4*>(dx);
    for (int64_t i = start; i < n4; i += stride) {
        const float4 a = g4[i], b = y4[i];
        d4[i] = make_float4(pass1(a.x, b.x), pass1(a.y, b.y), pass1(a.z, b.z), pass1(a.w, b.w));
    }
    for (int64_t i = 4 * n4 + start; i < n; i += stride) dx[i] = pass1(g[i], y[i]);
}

static int blocks_for(int64_t work, int threads) {
    return (int)std::min<int64_t>((work + threads - 1) / threads, 0x7fffffff);
}

const char* relu_fwd_launch(const float* x, float* y, int64_t n) {
    if (n == 0) return nullptr;
    const int64_t n4 = aligned16(x) && aligned16(y) ? n / 4 : 0;
    relu_fwd_kernel<<<blocks_for(n4 > 0 ? n4 : n, 256), 256>>>(x, y, n, n4);
    return launch_status();
}

const char* relu_bwd_launch(const float* g, const float* y, float* dx, int64_t n) {
    if (n == 0) return nullptr;
    const int64_t n4 = aligned16(g) && aligned16(y) && aligned16(dx) ? n / 4 : 0;
    relu_bwd_kernel<<<blocks_for(n4 > 0 ? n4 : n, 256), 256>>>(g, y, dx, n, n4);
    return launch_status();
}
"""

cpp_source = r"""
static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* relu_fwd_launch(const float* x, float* y, int64_t n);
const char* relu_bwd_launch(const float* g, const float* y, float* dx, int64_t n);

torch::Tensor relu_forward(torch::Tensor x) {
    check_f32_cuda(x, "x");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const char* err = relu_fwd_launch(xc.data_ptr<float>(), out.data_ptr<float>(), xc.numel());
    TORCH_CHECK(err == nullptr, "relu forward kernel failed: ", err);
    return out;
}

torch::Tensor relu_backward(torch::Tensor grad, torch::Tensor y) {
    check_f32_cuda(grad, "grad");
    check_f32_cuda(y, "y");
    TORCH_CHECK(grad.numel() == y.numel(), "grad and y must have the same size");
    auto gc = grad.contiguous();
    auto dx = torch::empty_like(y);
    const char* err = relu_bwd_launch(gc.data_ptr<float>(), y.data_ptr<float>(), dx.data_ptr<float>(), y.numel());
    TORCH_CHECK(err == nullptr, "relu backward kernel failed: ", err);
    return dx;
}
"""

_ext = load_inline(name="kf_oracle_cuda_relu_bwd", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["relu_forward", "relu_backward"], extra_cuda_cflags=["-O3"], verbose=False)


class ReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = _ext.relu_forward(x)
        ctx.save_for_backward(y)  # y > 0 exactly where x > 0: the output is all the backward needs
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _ext.relu_backward(grad, y)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ReLUFunction.apply(x)
