import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim1_kernel(x_ptr, out_ptr, R, inner, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # x viewed as (outer, R, inner); program (column block, outer index) sums R rows of BLOCK_C columns.
    # Any float storage: loads are widened to fp32, the store rounds once to the output's dtype.
    pid_c = tl.program_id(0)
    p = tl.program_id(1).to(tl.int64)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < inner
    rows = tl.arange(0, BLOCK_R)
    base = x_ptr + p * R * inner
    acc = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    # Three stages: the loads run ahead of the adds. On an H100 (256 x 4096 x 768) a plain loop left too few bytes
    # in flight: 0.81x of eager in bf16, 0.99x in fp32; pipelined 1.01-1.05x and 1.02x.
    for r0 in tl.range(0, R, BLOCK_R, num_stages=3):
        r = r0 + rows
        ptrs = base + r[:, None].to(tl.int64) * inner + cols[None, :]
        acc += tl.load(ptrs, mask=(r[:, None] < R) & cmask[None, :], other=0.0).to(tl.float32)
    tl.store(out_ptr + p * inner + cols, tl.sum(acc, axis=0), mask=cmask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer = 1
        for s in x.shape[:dim]:
            outer *= s
        R = x.shape[dim]
        inner = x.numel() // (outer * R) if outer * R > 0 else 0
        out_shape = list(x.shape)
        out_shape[dim] = 1
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        BLOCK_C = min(128, triton.next_power_of_2(max(inner, 1)))
        BLOCK_R = 32
        grid = (triton.cdiv(inner, BLOCK_C), outer)
        sum_dim1_kernel[grid](x, out, R, inner, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, num_warps=4)
        return out
