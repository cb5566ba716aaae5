"""At a reduced precision, values PyTorch's own computation in that precision resolves nothing of (its error at
least the value's own size: a GroupNorm's mean, a bias's gradient ahead of a BatchNorm, both zero but for rounding)
are judged by that accuracy alone; where it keeps part of the value, the tolerance decides
(`kforge.verify.compare.unresolved`, `kforge.verify.numerics.SIGNAL`)."""

import pytest
import torch

from kforge.problems import problem_from_source
from kforge.sandbox.harness import HarnessVerdict
from kforge.verify import State, Verifier
from kforge.verify.gradients import compare
from tests.helpers import fast_config

# After KernelBench level 2's Conv3d_GroupNorm_Mean: the mean of a GroupNorm's output is zero up to rounding, and
# PyTorch's own bf16 result is rounding noise thousands of times the truth's size.
GROUPNORM_MEAN = '''
import torch
import torch.nn as nn

batch_size = 64
in_features = 1024
out_features = 512
num_groups = 8


class Model(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)

    def forward(self, x):
        return self.group_norm(self.linear(x)).mean(dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups]
'''

# How a model writes it for accuracy: everything in float32, rounded once at the end. Its result is float32
# rounding noise too, another than the truth's: it was once a mismatch for missing a truth of 5e-9 by 7e-9.
GROUPNORM_MEAN_FP32 = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)

    def forward(self, x):
        h = torch.addmm(self.linear.bias.float(), x.float(), self.linear.weight.float().t())
        n, c = h.shape
        g = h.view(n, self.group_norm.num_groups, -1)
        mu = g.mean(-1, keepdim=True)
        var = (g - mu).pow(2).mean(-1, keepdim=True)
        y = ((g - mu) * torch.rsqrt(var + self.group_norm.eps)).view(n, c)
        y = y * self.group_norm.weight.float() + self.group_norm.bias.float()
        return y.mean(dim=1).to(x.dtype)
'''

NOISE = GROUPNORM_MEAN_FP32[:GROUPNORM_MEAN_FP32.index("    def forward")] + '''    def forward(self, x):
        return 1e-2 * torch.randn(x.shape[0], dtype=x.dtype)  # "the mean is zero anyway"
'''

# An offset added and taken away again: bf16's spacing at 300 is 2, so PyTorch's own bf16 result keeps x only to
# the nearest even number (its error about 0.58 of x's size): it resolves part of the value, and the tolerance
# decides there, PyTorch's own result included.
OFFSET = '''
import torch
import torch.nn as nn

batch_size = 32
dim = 4096


class Model(nn.Module):
    def __init__(self, offset):
        super().__init__()
        self.offset = offset

    def forward(self, x):
        return (x + self.offset) - self.offset


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [300.0]
'''

OFFSET_FP32 = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, offset):
        super().__init__()
        self.offset = offset

    def forward(self, x):
        xf = x.float()
        return ((xf + self.offset) - self.offset).to(x.dtype)
'''

# A Linear ahead of a BatchNorm in training mode, as many level-2 problems are: the Linear's bias has no effect on
# the output, so its gradient is zero but for rounding, and bf16 autograd's is noise far larger than the truth's.
GEMM_BN = '''
import torch
import torch.nn as nn

batch_size = 256
in_features = 512
out_features = 256


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return torch.relu(self.bn(self.gemm(x)))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''


def _verify(pool, source: str, candidate: str, **cfg):
    problem = problem_from_source(source, where="p.py", name="p")
    config = fast_config(require_kernel=False, precision="bf16", **cfg)
    return Verifier(config, pool=pool).verify(problem, candidate, "cpu")


def _self(source: str) -> str:
    return source + "\n\nModelNew = Model\n"


def test_an_exact_float32_program_is_correct_where_bf16_resolves_nothing_of_the_output(pool):
    v = _verify(pool, GROUPNORM_MEAN, GROUPNORM_MEAN_FP32)
    assert v.state is State.CORRECT, v.summary()
    v = _verify(pool, GROUPNORM_MEAN, _self(GROUPNORM_MEAN))
    assert v.state is State.CORRECT, v.summary()
    assert any("no closer to the truth than the truth's own size" in n for n in v.evidence.notes), v.summary()


def test_noise_larger_than_pytorchs_own_still_fails_where_bf16_resolves_nothing(pool):
    v = _verify(pool, GROUPNORM_MEAN, NOISE)
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()
    assert "more than 4x" in v.message, v.message


def test_where_pytorchs_own_bf16_keeps_part_of_the_value_the_tolerance_alone_decides(pool):
    v = _verify(pool, OFFSET, _self(OFFSET))
    assert v.state is State.NUMERICAL_MISMATCH and v.states["kernelbench"] == "correct", v.summary()
    assert "of the truth's RMS" in v.message and "does not excuse it" in v.message, v.message
    v = _verify(pool, OFFSET, OFFSET_FP32)
    assert v.state is State.CORRECT, v.summary()


@pytest.mark.parametrize("candidate", ["model", "own backward"])
def test_a_bias_gradient_ahead_of_a_batchnorm_is_held_to_bf16_autograds_own_accuracy(pool, candidate):
    """bf16 autograd's own training step was a mismatch under both rule sets on ten KernelBench level-2 problems
    (an H100): the gradient of a bias ahead of a normalisation, zero but for rounding. The second candidate is the
    Linear with a backward of its own, as models write one, its bias's gradient summed in float32."""
    source = _self(GEMM_BN)
    if candidate != "model":
        source = source.replace("return torch.relu(self.bn(self.gemm(x)))",
                                "return torch.relu(self.bn(LinearFn.apply(x, self.gemm.weight, self.gemm.bias)))")
        source = source.replace("class Model(nn.Module):", '''class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        return grad_out @ weight, grad_out.t() @ x, grad_out.float().sum(0).to(grad_out.dtype)


class Model(nn.Module):''', 1)
    v = _verify(pool, GEMM_BN, source, backward=True)
    assert v.state is State.CORRECT and v.states["kernelbench"] == "correct", v.summary()
    bias = [n for n in v.evidence.notes if n.startswith("the gradient of parameter gemm.bias")]
    assert bias and "no closer to the truth than the truth's own size" in bias[0], v.summary()


def test_a_gradient_exactly_zero_in_the_truth_is_held_to_pytorchs_own_accuracy():
    """An input's gradient through a clamp whose output is constant: zero in float32, while bf16 autograd passes
    some through at ties (KernelBench level 2's Conv3d_GroupNorm_Min_Clamp_Dropout, an H200)."""
    truth = torch.zeros(64, 32)
    native = torch.zeros(64, 32, dtype=torch.bfloat16)
    native[::7, ::5] = 0.0177  # the ties' gradient
    tol = lambda dtype: (0.015625, 0.015625)  # noqa: E731 - 4u at bf16
    notes = compare(torch, ["input 0"], [native.clone()], [native], "trial 0", torch.device("cpu"), tol, [truth])
    assert len(notes) == 1 and "no closer to the truth than the truth's own size" in notes[0], notes
    with pytest.raises(HarnessVerdict, match="more than 4x"):
        compare(torch, ["input 0"], [native * 8], [native], "trial 0", torch.device("cpu"), tol, [truth])


# Two scalings less than a bf16 step apart, subtracted: bf16 keeps about a third of the difference (its RMS error
# 0.7 of the truth's, on the CPU), in the output and in the input's gradient alike. As KernelBench level 2's 66 and
# 77 under --backward on an H100, where bf16 autograd's gradient was 0.6 of the truth's RMS off.
NEAR_SCALES = '''
import torch
import torch.nn as nn

batch_size = 64
features = 256


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(1.0, 2.0, features))

    def forward(self, x):
        near = self.weight + self.weight.abs() * 2 ** -8
        return x * self.weight - x * near


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''

# A careful forward (float32, rounded once) and a backward as a model might get it wrong: the second scaling's term
# of the input's gradient left out.
NEAR_SCALES_WRONG_BACKWARD = NEAR_SCALES.replace("class Model(nn.Module):", '''class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        w = weight.float()
        return (x.float() * (w - (w + w.abs() * 2 ** -8))).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        near = weight + weight.abs() * 2 ** -8
        return grad_out * weight, (grad_out * x).sum(0) - (grad_out * x * near / weight).sum(0)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(1.0, 2.0, features))

    def forward(self, x):
        return Scaled.apply(x, self.weight)


class Model(nn.Module):''', 1)


def test_under_kernelbenchs_rules_a_gradient_is_judged_against_pytorchs_own_in_the_precision(pool):
    """KernelBench has no backward: its rule set judges a bf16 gradient as it judges an output, against PyTorch's own
    in the precision at its 1e-2; the kforge rules against the float32 truth. bf16 autograd's own step was once a
    mismatch under both."""
    v = _verify(pool, NEAR_SCALES, _self(NEAR_SCALES), backward=True)
    assert v.state is State.NUMERICAL_MISMATCH and v.states["kernelbench"] == "correct", v.summary()
    v = _verify(pool, NEAR_SCALES, NEAR_SCALES_WRONG_BACKWARD, backward=True)
    assert v.state is State.NUMERICAL_MISMATCH and v.states["kernelbench"] == "numerical_mismatch", v.summary()
    assert "the gradient of input 0" in v.message, v.message
