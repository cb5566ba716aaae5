"""nn.Conv2d with a 3x3 kernel, stride 1, padding 1 and bias, on (BATCH, C_IN, H, W) images."""
import torch
import torch.nn as nn

BATCH = 32
C_IN = 128
C_OUT = 128
H = 128
W = 128

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 8, "C_IN": 64, "C_OUT": 64, "H": 64, "W": 64},
        "gpu": {"BATCH": 32, "C_IN": 128, "C_OUT": 128, "H": 128, "W": 128},
    },
    # 2 * N * Cout * Cin * KH * KW * Hout * Wout (padding keeps Hout = H, Wout = W), plus the bias add
    "flops": "2 * BATCH * C_OUT * C_IN * 9 * H * W + BATCH * C_OUT * H * W",
    "bytes": "4 * (BATCH * C_IN * H * W + C_OUT * C_IN * 9 + C_OUT + BATCH * C_OUT * H * W)",
    "ops": ["conv2d", "Conv2d", "convolution", "_convolution", "unfold", "matmul", "bmm", "mm", "einsum"],
}


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
