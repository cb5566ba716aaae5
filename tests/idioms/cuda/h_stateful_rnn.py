# expect: correct
# problem-file: ../problems/33_vanilla_rnn.py
# why: a faithful copy of a stateful RNN cell (hidden state drawn in __init__, reassigned in forward) whose two layers
# why: are CUDA kernels; judged as KernelBench judges it, both models fresh from one seed per trial
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <vector>

// y[b, j] = act(sum_k W[j, k] * [x, h][b, k] + bias[j]); one thread per output element, a warp-strided dot.
template <bool TANH>
__global__ void dense_kernel(const float* __restrict__ x, int64_t nx, const float* __restrict__ h, int64_t nh,
                             const float* __restrict__ W, const float* __restrict__ bias,
                             float* __restrict__ y, int64_t B, int64_t J) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * J) return;
    int64_t b = idx / J, j = idx % J;
    const float* w = W + j * (nx + nh);
    float acc = bias[j];
    for (int64_t k = 0; k < nx; ++k) acc += w[k] * x[b * nx + k];
    for (int64_t k = 0; k < nh; ++k) acc += w[nx + k] * h[b * nh + k];
    y[idx] = TANH ? tanhf(acc) : acc;
}

std::vector<torch::Tensor> rnn_step(torch::Tensor x, torch::Tensor h, torch::Tensor w_ih, torch::Tensor b_ih,
                                    torch::Tensor w_ho, torch::Tensor b_ho) {
    x = x.contiguous(); h = h.contiguous(); w_ih = w_ih.contiguous(); w_ho = w_ho.contiguous();
    const int64_t B = x.size(0), I = x.size(1), H = h.size(1), O = w_ho.size(0);
    auto h_new = torch::empty({B, H}, x.options());
    auto y = torch::empty({B, O}, x.options());
    const int threads = 256;
    dense_kernel<true><<<(unsigned)((B * H + threads - 1) / threads), threads>>>(
        x.data_ptr<float>(), I, h.data_ptr<float>(), H, w_ih.data_ptr<float>(), b_ih.data_ptr<float>(),
        h_new.data_ptr<float>(), B, H);
    dense_kernel<false><<<(unsigned)((B * O + threads - 1) / threads), threads>>>(
        h_new.data_ptr<float>(), H, nullptr, 0, w_ho.data_ptr<float>(), b_ho.data_ptr<float>(),
        y.data_ptr<float>(), B, O);
    return {y, h_new};
}
"""

cpp_src = "std::vector<torch::Tensor> rnn_step(torch::Tensor x, torch::Tensor h, torch::Tensor w_ih, " \
          "torch::Tensor b_ih, torch::Tensor w_ho, torch::Tensor b_ho);"

rnn_ext = load_inline(
    name="kf_idiom_cuda_rnn_step",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["rnn_step"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super(ModelNew, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.hidden = torch.randn((batch_size, hidden_size))  # drawn first, as the reference draws it
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.hidden = self.hidden.to(x.device)
        y, self.hidden = rnn_ext.rnn_step(x, self.hidden, self.i2h.weight, self.i2h.bias,
                                          self.h2o.weight, self.h2o.bias)
        return y
