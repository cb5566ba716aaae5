"""Sum over dim 1 (keepdim) of a (BATCH, DIM1, DIM2) tensor."""
import torch
import torch.nn as nn

BATCH = 256
DIM1 = 4096
DIM2 = 768

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 32, "DIM1": 512, "DIM2": 768},
        "gpu": {"BATCH": 256, "DIM1": 4096, "DIM2": 768},  # 3.2 GB in
    },
    # one add per input element
    "flops": "BATCH * DIM1 * DIM2",
    "bytes": "4 * (BATCH * DIM1 * DIM2 + BATCH * DIM2)",
    "ops": ["sum", "mean", "einsum", "matmul"],
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    # positive values: no cancellation, so fp32 rounding of any summation order stays within rtol
    return [torch.rand(BATCH, DIM1, DIM2)]


def get_init_inputs():
    return [1]
