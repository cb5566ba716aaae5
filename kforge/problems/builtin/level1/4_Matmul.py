"""Matrix product C = A @ B with A: (M, K) and B: (K, N)."""
import torch
import torch.nn as nn

M = 8192
K = 4096
N = 2048

KFORGE = {
    "sizes": {
        "cpu": {"M": 2048, "K": 1024, "N": 512},
        "gpu": {"M": 8192, "K": 4096, "N": 2048},
    },
    # one multiply and one add per (m, n, k)
    "flops": "2 * M * N * K",
    "bytes": "4 * (M * K + K * N + M * N)",
    "ops": ["matmul", "mm", "bmm", "addmm", "einsum", "linear", "tensordot"],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    # scaled so that C has unit variance: with plain randn C's entries have std sqrt(K) = 64, and the
    # fp32 reference's own rounding on entries near 0 exceeds atol=rtol=1e-4 (3.4x on an H100, K=4096)
    scale = K ** -0.25
    return [torch.randn(M, K) * scale, torch.randn(K, N) * scale]


def get_init_inputs():
    return []
