"""Pre-norm transformer MLP block: x + Linear2(GELU(Linear1(LayerNorm(x)))), hidden = 4 * DIM."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ = 1024
DIM = 1024

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 2, "SEQ": 256, "DIM": 512},
        "gpu": {"BATCH": 8, "SEQ": 1024, "DIM": 1024},
    },
    # two GEMMs of 2*T*D*4D each (T = BATCH*SEQ); layer norm 8/elem on T*D, biases + GELU 9/elem on
    # T*4D, second bias + residual 2/elem on T*D
    "flops": "16 * BATCH * SEQ * DIM * DIM + 8 * BATCH * SEQ * DIM + 36 * BATCH * SEQ * DIM + 2 * BATCH * SEQ * DIM",
    # x in, out; LN weight+bias (2D), W1 (4D*D) + b1 (4D), W2 (D*4D) + b2 (D); the hidden state stays on chip
    "bytes": "4 * (2 * BATCH * SEQ * DIM + 8 * DIM * DIM + 7 * DIM)",
    "ops": ["linear", "Linear", "addmm", "matmul", "mm", "bmm", "einsum", "gelu", "GELU", "erf",
            "layer_norm", "LayerNorm", "native_layer_norm"],
}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM]
