"""Pre-norm multi-head self-attention block (no mask):
x + Linear_out(softmax(q k^T / sqrt(hd)) v), with q, k, v = split_heads(Linear_qkv(LayerNorm(x)))."""
import math

import torch
import torch.nn as nn

BATCH = 8
SEQ = 1024
DIM = 1024
HEADS = 16

KFORGE = {
    "sizes": {
        "cpu": {"BATCH": 4, "SEQ": 256, "DIM": 256, "HEADS": 8},
        "gpu": {"BATCH": 8, "SEQ": 1024, "DIM": 1024, "HEADS": 16},
    },
    # qkv GEMM 2*T*D*3D + out GEMM 2*T*D*D (T = BATCH*SEQ); q k^T and p v 2*B*S*S*D each;
    # softmax 5/score + scaling 1/score on B*HEADS*S*S; layer norm 8/elem, biases 4/elem, residual 1/elem on T*D
    "flops": "8 * BATCH * SEQ * DIM * DIM + 4 * BATCH * SEQ * SEQ * DIM + 6 * BATCH * HEADS * SEQ * SEQ"
             " + 13 * BATCH * SEQ * DIM",
    # x in, out; LN weight+bias (2D), W_qkv (3D*D) + b (3D), W_out (D*D) + b (D); scores stay on chip
    "bytes": "4 * (2 * BATCH * SEQ * DIM + 4 * DIM * DIM + 6 * DIM)",
    "ops": ["linear", "Linear", "addmm", "matmul", "mm", "bmm", "baddbmm", "einsum", "softmax", "Softmax",
            "scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
            "layer_norm", "LayerNorm", "native_layer_norm"],
}


class Model(nn.Module):
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


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS]
