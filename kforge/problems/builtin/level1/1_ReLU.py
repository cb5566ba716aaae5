"""ReLU applied elementwise to a (BATCH, DIM) tensor."""
import torch
import torch.nn as nn

BATCH = 4096
DIM = 98304

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 64, "DIM": 98304},
        "gpu": {"BATCH": 4096, "DIM": 98304},  # 1.6 GB in + 1.6 GB out
    },
    # one compare-select per element
    "flops": "BATCH * DIM",
    # x read once, output written once
    "bytes": "2 * 4 * BATCH * DIM",
    "ops": ["relu", "ReLU", "relu_", "clamp", "clamp_min"],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
