"""nn.Conv2d (3x3, padding 1, bias) -> ReLU -> MaxPool2d(2) on (BATCH, C_IN, H, W) images."""
import torch
import torch.nn as nn

BATCH = 16
C_IN = 64
C_OUT = 128
H = 256
W = 256

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 8, "C_IN": 32, "C_OUT": 64, "H": 64, "W": 64},
        "gpu": {"BATCH": 16, "C_IN": 64, "C_OUT": 128, "H": 256, "W": 256},
    },
    # conv 2*N*Cout*Cin*9*H*W; per conv output element: bias 1, ReLU 1, max-pool ~1 (3 compares per 4)
    "flops": "2 * BATCH * C_OUT * C_IN * 9 * H * W + 3 * BATCH * C_OUT * H * W",
    # input, weight, bias read once; only the pooled output is written
    "bytes": "4 * (BATCH * C_IN * H * W + C_OUT * C_IN * 9 + C_OUT + BATCH * C_OUT * (H // 2) * (W // 2))",
    "ops": ["conv2d", "Conv2d", "convolution", "_convolution", "unfold", "matmul", "bmm", "mm", "einsum",
            "relu", "ReLU", "max_pool2d", "MaxPool2d", "max_pool2d_with_indices"],
}


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=True)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT]
