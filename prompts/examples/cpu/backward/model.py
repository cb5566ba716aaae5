import torch
import torch.nn as nn


class Model(nn.Module):
    """Scales the sum of two tensors column by column with a learnt weight: out = (a + b) * weight."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a + b) * self.weight


def get_inputs():
    return [torch.randn(256, 1024), torch.randn(256, 1024)]


def get_init_inputs():
    return [1024]
