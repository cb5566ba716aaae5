import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer followed by ReLU: out = relu(x @ W^T + b)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(1024, 512)]


def get_init_inputs():
    return [512, 256]
