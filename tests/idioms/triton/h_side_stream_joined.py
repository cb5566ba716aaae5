# expect: correct
# why: a Triton kernel launched inside `with torch.cuda.stream(...)` on the model's own stream, joined back
#   with wait_stream before the output is used
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x):
        self.side = self.side or torch.cuda.Stream()
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            x = x.contiguous()
            y = torch.empty_like(x)
            n = x.numel()
            _relu[(triton.cdiv(n, 2048),)](x, y, n, BLOCK=2048)
        main.wait_stream(self.side)
        return y
