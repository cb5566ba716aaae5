"""Gated RMSNorm: rmsnorm(x) * weight * silu(g), normalising over the last dimension (eps = 1e-6)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 65536
DIM = 4096

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 1536, "DIM": 4096},
        "gpu": {"BATCH": 65536, "DIM": 4096},  # 2 x 1.07 GB in + 1.07 GB out
    },
    # per element: square+add 2, normalise 1, weight 1, silu ~4 (exp, add, divide, multiply), gate 1
    "flops": "9 * BATCH * DIM",
    "bytes": "3 * 4 * BATCH * DIM + 4 * DIM",
    "ops": ["rms_norm", "RMSNorm", "rsqrt", "silu", "SiLU", "sigmoid"],
}


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        # not ones, so that a kernel which drops the weight fails
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight * F.silu(g)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM]
