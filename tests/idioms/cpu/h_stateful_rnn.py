# expect: correct
# problem-file: ../problems/33_vanilla_rnn.py
# why: a faithful copy of a stateful RNN cell (hidden state drawn in __init__, reassigned in forward) with the cell
# why: fused into one C++ kernel; judged as KernelBench judges it, both models fresh from one seed per trial
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rnn_cell_source = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>

// One RNN step: h' = tanh(W_ih [x, h] + b_ih), y = W_ho h' + b_ho. Returns {y, h'}.
std::vector<torch::Tensor> rnn_cell_forward(torch::Tensor x, torch::Tensor h,
                                            torch::Tensor w_ih, torch::Tensor b_ih,
                                            torch::Tensor w_ho, torch::Tensor b_ho) {
    x = x.contiguous(); h = h.contiguous();
    w_ih = w_ih.contiguous(); w_ho = w_ho.contiguous();
    const int64_t B = x.size(0), I = x.size(1), H = h.size(1), O = w_ho.size(0);
    auto h_new = torch::empty({B, H}, x.options());
    auto y = torch::empty({B, O}, x.options());
    const float* px = x.data_ptr<float>();
    const float* ph = h.data_ptr<float>();
    const float* pw = w_ih.data_ptr<float>();
    const float* pb = b_ih.data_ptr<float>();
    const float* pwo = w_ho.data_ptr<float>();
    const float* pbo = b_ho.data_ptr<float>();
    float* pn = h_new.data_ptr<float>();
    float* py = y.data_ptr<float>();
    #pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < H; ++j) {
            const float* row = pw + j * (I + H);
            double acc = pb[j];
            for (int64_t k = 0; k < I; ++k) acc += (double)row[k] * px[b * I + k];
            for (int64_t k = 0; k < H; ++k) acc += (double)row[I + k] * ph[b * H + k];
            pn[b * H + j] = std::tanh((float)acc);
        }
    }
    #pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t o = 0; o < O; ++o) {
            const float* row = pwo + o * H;
            double acc = pbo[o];
            for (int64_t k = 0; k < H; ++k) acc += (double)row[k] * pn[b * H + k];
            py[b * O + o] = (float)acc;
        }
    }
    return {y, h_new};
}
"""

rnn_cell = load_inline(
    name="kf_idiom_rnn_cell",
    cpp_sources=[rnn_cell_source],
    functions=["rnn_cell_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super(ModelNew, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        # Same draw order as the reference: the hidden state first, then the two layers.
        self.hidden = torch.randn((batch_size, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.hidden = self.hidden.to(x.device)
        out, self.hidden = rnn_cell.rnn_cell_forward(x, self.hidden, self.i2h.weight, self.i2h.bias,
                                                     self.h2o.weight, self.h2o.bias)
        return out
