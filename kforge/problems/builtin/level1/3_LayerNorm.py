"""nn.LayerNorm over the last dimension of a (BATCH, DIM) tensor, with elementwise affine."""
import torch
import torch.nn as nn

BATCH = 65536
DIM = 6144

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 1024, "DIM": 6144},
        "gpu": {"BATCH": 65536, "DIM": 6144},  # 1.6 GB in + 1.6 GB out
    },
    # per element: mean (add), variance (sub, mul, add), normalise (sub, mul), affine (mul, add)
    "flops": "8 * BATCH * DIM",
    # x read once, output written once, weight and bias read once
    "bytes": "2 * 4 * BATCH * DIM + 2 * 4 * DIM",
    "ops": ["layer_norm", "LayerNorm", "native_layer_norm", "var_mean", "mean", "var"],
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM]
