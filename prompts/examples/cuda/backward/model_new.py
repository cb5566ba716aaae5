import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# CUDA part: plain CUDA C++ with no torch headers (it compiles much faster). Kernels and launchers that take raw
# pointers and return nullptr on success or the CUDA error string.
cuda_source = r"""
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

static const char* launch_status() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// out[i, j] = (a[i, j] + b[i, j]) * w[j], grid-stride loop
__global__ void add_scale_fwd_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                     const float* __restrict__ w, float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = (a[i] + b[i]) * w[i % cols];
}

// A block of 32 x 8 threads owns 32 columns and walks down every row: threadIdx.x picks the column (coalesced
// loads), threadIdx.y the row. It writes d(a) = d(b) = g * w and sums g * (a + b) over its rows; the 8 partial
// sums of a column are added in shared memory, so d(w) needs no atomics and comes out the same every run.
__global__ void add_scale_bwd_kernel(const float* __restrict__ g, const float* __restrict__ a,
                                     const float* __restrict__ b, const float* __restrict__ w,
                                     float* __restrict__ dab, float* __restrict__ dw, int64_t rows, int64_t cols) {
    __shared__ float partial[8][33];  // 33: no bank conflicts when reading a column
    const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (j < cols) {
        const float wj = w[j];
        for (int64_t i = threadIdx.y; i < rows; i += 8) {
            const int64_t k = i * cols + j;
            const float gk = g[k];
            dab[k] = gk * wj;
            acc += gk * (a[k] + b[k]);
        }
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        float s = 0.f;
        for (int r = 0; r < 8; ++r) s += partial[r][threadIdx.x];
        dw[j] = s;
    }
}

const char* add_scale_fwd_launch(const float* a, const float* b, const float* w, float* out, int64_t n, int64_t cols) {
    if (n == 0) return nullptr;
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
    add_scale_fwd_kernel<<<blocks, threads>>>(a, b, w, out, n, cols);  // the current (default) stream
    return launch_status();
}

const char* add_scale_bwd_launch(const float* g, const float* a, const float* b, const float* w, float* dab,
                                 float* dw, int64_t rows, int64_t cols) {
    if (cols == 0) return nullptr;
    add_scale_bwd_kernel<<<(unsigned)((cols + 31) / 32), dim3(32, 8)>>>(g, a, b, w, dab, dw, rows, cols);
    return launch_status();
}
"""

# C++ part (load_inline prefixes it with #include <torch/extension.h>): checks, allocation, launches.
cpp_source = r"""
#include <vector>

const char* add_scale_fwd_launch(const float* a, const float* b, const float* w, float* out, int64_t n, int64_t cols);
const char* add_scale_bwd_launch(const float* g, const float* a, const float* b, const float* w, float* dab,
                                 float* dw, int64_t rows, int64_t cols);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32, name, " must be a float32 CUDA tensor");
}

torch::Tensor add_scale_forward(torch::Tensor a, torch::Tensor b, torch::Tensor w) {
    check(a, "a"); check(b, "b"); check(w, "weight");
    TORCH_CHECK(a.sizes() == b.sizes() && a.size(-1) == w.numel(), "shape mismatch");
    auto ac = a.contiguous(), bc = b.contiguous(), wc = w.contiguous();
    auto out = torch::empty_like(ac);  // every element is written by the kernel
    const char* err = add_scale_fwd_launch(ac.data_ptr<float>(), bc.data_ptr<float>(), wc.data_ptr<float>(),
                                           out.data_ptr<float>(), ac.numel(), wc.numel());
    TORCH_CHECK(err == nullptr, "add_scale forward kernel failed: ", err);
    return out;
}

std::vector<torch::Tensor> add_scale_backward(torch::Tensor g, torch::Tensor a, torch::Tensor b, torch::Tensor w) {
    check(g, "grad"); check(a, "a"); check(b, "b"); check(w, "weight");
    auto gc = g.contiguous(), ac = a.contiguous(), bc = b.contiguous(), wc = w.contiguous();
    auto dab = torch::empty_like(gc);
    auto dw = torch::empty_like(wc);
    const int64_t cols = wc.numel();
    const char* err = add_scale_bwd_launch(gc.data_ptr<float>(), ac.data_ptr<float>(), bc.data_ptr<float>(),
                                           wc.data_ptr<float>(), dab.data_ptr<float>(), dw.data_ptr<float>(),
                                           gc.numel() / cols, cols);
    TORCH_CHECK(err == nullptr, "add_scale backward kernel failed: ", err);
    return {dab, dw};
}
"""

add_scale_ext = load_inline(
    name="add_scale_train_cuda_ext",
    cpp_sources=[cpp_source],
    cuda_sources=[cuda_source],
    functions=["add_scale_forward", "add_scale_backward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class AddScale(torch.autograd.Function):
    """Autograd calls forward, then backward with the gradient of the output; both launch our kernels."""

    @staticmethod
    def forward(ctx, a, b, weight):
        ctx.save_for_backward(a, b, weight)  # what the backward needs (recomputing a + b there saves memory)
        return add_scale_ext.add_scale_forward(a, b, weight)

    @staticmethod
    def backward(ctx, grad_out):
        a, b, weight = ctx.saved_tensors
        d_ab, d_weight = add_scale_ext.add_scale_backward(grad_out, a, b, weight)
        return d_ab, d_ab, d_weight  # one gradient per argument of forward, in order


class ModelNew(nn.Module):
    """Same constructor, forward signature and parameters (same names) as Model; the work happens in the kernels."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return AddScale.apply(a, b, self.weight)
