# expect: kernel_unused
# rule: kernel_result_discarded
# problem-file: ../problems/37_lstm_cn.py
# why: the reference runs fc on the LSTM's output and returns the cell state; this candidate computes that fc in a
# why: Triton kernel and discards it just the same: no decoy (PyTorch's LSTM computes the answer)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, K, N, stride_xm, BLOCK_K: tl.constexpr):
    # one program per output element y[m, n] = sum_k x[m, k] * w[n, k] + b[n]
    m = tl.program_id(0)
    n = tl.program_id(1)
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        mask = offs < K
        xv = tl.load(x_ptr + m * stride_xm + offs, mask=mask, other=0.0)
        wv = tl.load(w_ptr + n * K + offs, mask=mask, other=0.0)
        acc += xv * wv
    out = tl.sum(acc, axis=0) + tl.load(b_ptr + n)
    tl.store(y_ptr + m * N + n, out)


def triton_linear(x, weight, bias):
    x = x.contiguous()
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    linear_row_kernel[(M, N)](x, weight.contiguous(), bias, y, K, N, x.stride(0), BLOCK_K=64)
    return y


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size, dropout=0.0):
        super(ModelNew, self).__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, dropout=dropout, bidirectional=False)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0, c0):
        out, state = self.lstm(x, (h0, c0))
        out = triton_linear(out[:, -1, :], self.fc.weight, self.fc.bias)  # as the original: computed, not returned
        return state[1]
