"""What the triton backend counts as a kernel of the candidate's own."""

from kforge.backends import get_backend

GLUON_ONLY = '''
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def copy_kernel(src, dst, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    gl.store(dst + offs, gl.load(src + offs, mask=offs < n), mask=offs < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 512),)](x, out, x.numel(), BLOCK=512, num_warps=4)
        return out
'''


def test_triton_and_gluon_kernels_count_and_plain_torch_does_not():
    backend = get_backend("triton")
    assert backend.has_kernel(GLUON_ONLY)
    assert backend.has_kernel("import triton\n@triton.jit\ndef k(x): pass\n")
    assert not backend.has_kernel("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                                  "        return torch.relu(x)\n")
