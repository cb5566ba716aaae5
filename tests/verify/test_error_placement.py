"""Where an output's error lies, at a reduced precision (`kforge.verify.numerics`): the absolute tolerance follows
an output's spread about its neighbours (`compare.local_spread`), and an output as accurate overall as PyTorch's own
result must not be many tolerances off at its worst element (`compare.tolerances_off`, `OFF_SLACK`). A scan leaving
out a term erred as much as PyTorch's bf16 cumsum overall, all of it in the small values; a bias added after the
rounded product is one more rounding, a few tolerances off. And an overflow PyTorch's own result shares is said so."""

import pytest

from kforge.verify import State
from tests.verify.test_native_accuracy import _verify

# KernelBench level 1's cumsum, at a CPU size: its values climb from 0.5 to about 2048 along each row.
CUMSUM = '''
import torch
import torch.nn as nn

batch_size = 64
input_shape = (4096,)
dim = 1


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.rand(batch_size, *input_shape)]


def get_init_inputs():
    return [dim]
'''
SCAN = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        run = torch.cumsum(x.float(), dim=self.dim)  # a float running sum, rounded once
        return ({}).to(x.dtype)
'''


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("scan, right", [("run", True), ("run - x.float()", False), ("run - x.float()[:, :1]", False)])
def test_a_scan_that_leaves_out_a_term_is_no_rounding(pool, precision, scan, right):
    """An exclusive scan for the inclusive one, or one leaving out each row's first term, was `correct` at bf16 and
    fp16: the absolute tolerance was 4u of the output's spread (9.2 at bf16, its values climbing to 2048), and its
    largest and RMS errors those of PyTorch's own result, whose 2048s round by 8."""
    v = _verify(pool, CUMSUM, SCAN.replace("{}", scan), precision)
    if right:
        assert v.state is State.CORRECT, v.summary()
        return
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()
    assert "the error is where rounding does not reach" in v.message, v.message


def test_an_overflow_pytorchs_own_half_result_shares_is_said_so(pool):
    """At fp16, ``x * 1000 / 1000`` of values past 65.5 overflows in PyTorch's own fp16 result too: the mismatch
    said only that the output was inf, and its author looked for a bug rather than at the intermediate."""
    src = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return x * 1000.0 / 1000.0\n\n\ndef get_inputs():\n    return [torch.rand(16, 64) * 100 + 70]\n\n\n"
           "def get_init_inputs():\n    return []\n")
    v = _verify(pool, src, src.replace("class Model(", "class ModelNew("), "fp16")
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()
    assert "PyTorch's own fp16 result is not finite in 1024 place(s) either" in v.message, v.message


# A Linear whose inputs are one row scaled along the batch: its output is smooth down each column.
SMOOTH_LINEAR = '''
import torch
import torch.nn as nn

batch_size = 512
in_features = 256
out_features = 256


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.gemm(x)


def get_inputs():
    return [torch.randn(1, in_features) * torch.linspace(-1.0, 1.0, batch_size)[:, None]]


def get_init_inputs():
    return [in_features, out_features]
'''


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_bias_added_after_the_rounded_product_is_one_more_rounding_not_an_error(pool, precision):
    """addmm rounds once; a kernel that stores the product and adds the bias after rounds twice, which lands where
    the truth is near zero: 5 tolerances off there, PyTorch's own 0.25. Judged by the worst element against four
    times PyTorch's, it failed; a scan leaving out a term is 45 or more."""
    cand = SMOOTH_LINEAR.replace("class Model(", "class ModelNew(").replace(
        "return self.gemm(x)", "return torch.matmul(x, self.gemm.weight.t()) + self.gemm.bias")
    v = _verify(pool, SMOOTH_LINEAR, cand, precision)
    assert v.state is State.CORRECT, v.summary()
