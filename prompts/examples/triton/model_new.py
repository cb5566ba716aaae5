import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_scale_kernel(a_ptr, b_ptr, out_ptr, n, scale, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n  # the last block may run past the end
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, (a + b) * scale, mask=mask)


class ModelNew(nn.Module):
    """Same constructor and forward signature as Model; the work happens in the Triton kernel."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        out = torch.empty_like(a)  # on the inputs' device; every element is written by the kernel
        n = a.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
        add_scale_kernel[grid](a, b, out, n, self.scale, BLOCK_SIZE=1024)
        return out
