# expect: kernel_unused
# rule: kernel_not_run
# why: the Triton path only runs for shapes the benchmark never uses
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


def triton_relu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    relu_kernel[grid](x, y, n, BLOCK_SIZE=1024)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        if x.shape[-1] == 12345:
            return triton_relu(x)
        return torch.relu(x)
