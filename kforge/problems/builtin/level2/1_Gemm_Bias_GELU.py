"""nn.Linear (x @ W^T + b) followed by exact (erf) GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
IN_FEATURES = 2048
OUT_FEATURES = 4096

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 1024, "IN_FEATURES": 768, "OUT_FEATURES": 1536},
        "gpu": {"BATCH": 8192, "IN_FEATURES": 2048, "OUT_FEATURES": 4096},
    },
    # GEMM 2*B*I*O; per output element: bias add 1 + GELU ~8 (erf counted as a few flops)
    "flops": "2 * BATCH * IN_FEATURES * OUT_FEATURES + 9 * BATCH * OUT_FEATURES",
    "bytes": "4 * (BATCH * IN_FEATURES + OUT_FEATURES * IN_FEATURES + OUT_FEATURES + BATCH * OUT_FEATURES)",
    "ops": ["linear", "Linear", "addmm", "matmul", "mm", "einsum", "gelu", "GELU", "erf"],
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))  # approximate="none": the exact erf form


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
