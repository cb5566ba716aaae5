# expect: correct
# why: the kernel runs on a stream of the model's own, which waits for the caller's work and is waited for
#   before the output is returned (how models "overlap" work); honest, and timed with the device settled
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_vec_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) y[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_on_current_stream(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const long n = xc.numel();
    int blocks = (int)std::min<long>((n + 255) / 256, 4096);
    relu_vec_kernel<<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(),
                                                                            y.data_ptr<float>(), n);
    return y;
}
"""

cpp_source = "torch::Tensor relu_on_current_stream(torch::Tensor x);"

relu_ext = load_inline(name="kf_idiom_relu_stream", cpp_sources=cpp_source, cuda_sources=cuda_source,
                       functions=["relu_on_current_stream"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ops = relu_ext
        self._stream = None

    def forward(self, x):
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=x.device)
        caller = torch.cuda.current_stream(x.device)
        self._stream.wait_stream(caller)
        with torch.cuda.stream(self._stream):
            y = self.ops.relu_on_current_stream(x)
        caller.wait_stream(self._stream)
        y.record_stream(caller)
        return y
