"""Residual add x + y followed by nn.LayerNorm over the last dimension (elementwise affine)."""
import torch
import torch.nn as nn

BATCH = 32768
DIM = 8192

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 768, "DIM": 8192},
        "gpu": {"BATCH": 32768, "DIM": 8192},  # 2 x 1.07 GB in + 1.07 GB out
    },
    # per element: residual add 1 + layer norm 8 (see level1/3_LayerNorm)
    "flops": "9 * BATCH * DIM",
    "bytes": "3 * 4 * BATCH * DIM + 2 * 4 * DIM",
    "ops": ["layer_norm", "LayerNorm", "native_layer_norm", "var_mean", "mean", "var", "add"],
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.norm(x + y)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM]
