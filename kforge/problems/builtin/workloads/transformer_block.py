"""A pre-norm transformer block with a gated MLP, built from modules the built-in suite has as problems:
attention (level3/2), LayerNorm (level1/3), Linear+GELU (level2/1), plain matrix products (level1/4) and
the gated RMSNorm (level2/4). Each submodule's class is that problem's `Model`, renamed, so an extracted
region is the very problem and the `oracle` answers it.

y = x1 + (rmsnorm(gelu(h W_up^T + b)) * w * silu(h @ W_gate)) @ W_down,  h = LayerNorm(x1),  x1 = attn(x)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ = 1024
DIM = 1024
HEADS = 16
HIDDEN = 2048

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 2, "SEQ": 128, "DIM": 256, "HEADS": 4, "HIDDEN": 512},
        "gpu": {"BATCH": 8, "SEQ": 1024, "DIM": 1024, "HEADS": 16, "HIDDEN": 2048},
    },
}


class AttentionBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        hd = d // self.heads
        qkv = self.qkv(self.norm(x)).view(b, s, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (b, heads, s, hd)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        attn = torch.softmax(scores, dim=-1)
        y = torch.matmul(attn, v).transpose(1, 2).reshape(b, s, d)
        return x + self.out(y)


class Norm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class GemmBiasGELU(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))  # approximate="none": the exact erf form


class Matmul(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


class GatedRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        # not ones, so that a kernel which drops the weight fails
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight * F.silu(g)


class Model(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.attn = AttentionBlock(dim, heads)
        self.norm = Norm(dim)
        self.up = GemmBiasGELU(dim, hidden)
        # the gate and down projections are bare weights multiplied by a Matmul module (no bias)
        self.w_gate = nn.Parameter(torch.randn(dim, hidden) * dim ** -0.5)
        self.gate = Matmul()
        self.gate_norm = GatedRMSNorm(hidden)
        self.w_down = nn.Parameter(torch.randn(hidden, dim) * hidden ** -0.5)
        self.down = Matmul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        x = self.attn(x)
        h = self.norm(x).reshape(b * s, d)
        y = self.gate_norm(self.up(h), self.gate(h, self.w_gate))
        return x + self.down(y, self.w_down).view(b, s, d)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS, HIDDEN]
