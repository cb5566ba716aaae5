"""At a reduced precision the kforge rules judge outputs against the float32 truth (`kforge.verify.numerics`); a
program as accurate as PyTorch's own computation in that precision is correct there even where its rounded
intermediates take it outside the derived tolerance, and one further from the truth is told how far PyTorch was."""

import pytest
import torch

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from kforge.verify.compare import Mismatch, check_degenerate
from tests.helpers import fast_config

# After KernelBench level 2's Gemm_BatchNorm_Scaling_Softmax, at a CPU size: bf16 eager rounds the product and the
# normalised logits to bf16 before the softmax, which lands outside 4u of the float32 truth on a hundred elements.
GEMM_SOFTMAX = '''
import torch
import torch.nn as nn

batch_size = 256
in_features = 1024
out_features = 512
scale = 2.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        self.scale = scale

    def forward(self, x):
        x = self.bn(self.gemm(x))
        return torch.softmax(x * self.scale, dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
'''

# How a model writes it: each step as PyTorch's bf16 path computes it.
AS_EAGER = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        self.scale = scale

    def forward(self, x):
        logits = F.linear(x, self.gemm.weight, self.gemm.bias)
        logits = F.batch_norm(logits, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                              training=True, momentum=self.bn.momentum, eps=self.bn.eps)
        return F.softmax(logits * self.scale, dim=-1)
'''

# The same in float32, rounded once at the end: more accurate than eager, inside the tolerance on its own.
IN_FLOAT32 = AS_EAGER.replace("logits = F.linear(x, self.gemm.weight, self.gemm.bias)",
                              "logits = F.linear(x.float(), self.gemm.weight.float(), self.gemm.bias.float())").replace(
    "self.bn.weight, self.bn.bias,", "self.bn.weight.float(), self.bn.bias.float(),").replace(
    "self.bn.running_mean, self.bn.running_var", "self.bn.running_mean.float(), self.bn.running_var.float()").replace(
    "return F.softmax(logits * self.scale, dim=-1)", "return F.softmax(logits * self.scale, dim=-1).to(x.dtype)")

# A shortcut a model might take for speed: the weights rounded to 3 significant bits before the product (4 bits
# left the output 4x as far from the truth as bf16 eager in RMS, right at NATIVE_SLACK; 3 bits, 6.5-8.3x).
COARSER = AS_EAGER.replace("F.linear(x, self.gemm.weight, self.gemm.bias)",
                           "F.linear(x, (self.gemm.weight.float() * 2 ** 8).round().div(2 ** 8).to(x.dtype), "
                           "self.gemm.bias)")

# A row sum of 131072 sigmoids: about 65536 (spread about 75), where bf16's spacing is 512, so the model's own bf16
# output is one constant while the float32 truth varies.
SIGMOID_SUM = '''
import torch
import torch.nn as nn

batch_size = 8
dim = 131072


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

SIGMOID_SUM_NEW = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.sum(torch.sigmoid(x), dim=-1, keepdim=True)
'''


def _verify(pool, source: str, candidate: str, precision: str = "bf16"):
    problem = problem_from_source(source, where="p.py", name="p")
    return Verifier(fast_config(require_kernel=False, precision=precision), pool=pool).verify(problem, candidate, "cpu")


def test_a_program_as_accurate_as_pytorchs_own_bf16_is_correct_under_the_kforge_rules(pool):
    v = _verify(pool, GEMM_SOFTMAX, AS_EAGER)
    assert v.state is State.CORRECT and v.states["kernelbench"] == "correct", v.summary()
    notes = [n for n in v.evidence.notes if "as accurate as PyTorch's own bf16 result" in n]
    assert len(notes) == 1 and notes[0].startswith("output 0 is outside the bf16 tolerance"), v.summary()


def test_a_more_accurate_program_needs_no_allowance(pool):
    v = _verify(pool, GEMM_SOFTMAX, IN_FLOAT32)
    assert v.state is State.CORRECT, v.summary()
    assert not any("as accurate as PyTorch" in n for n in v.evidence.notes), v.summary()


def test_a_program_further_from_the_truth_than_pytorchs_bf16_is_told_how_far_pytorch_was(pool):
    v = _verify(pool, GEMM_SOFTMAX, COARSER)
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()
    assert "PyTorch's own bf16 result is at most" in v.message and "more than 4x" in v.message, v.message
    assert "a sum or an intermediate kept in bf16 rather than float32 would do that" in v.message, v.message
    m = v.evidence.mismatch
    assert m["max_abs_err"] > 4 * m["native_max_abs_err"] or m["rms_err"] > 4 * m["native_rms_err"], m
    # far beyond a precision's error the result is wrong, not rounded: no hint of an accumulator then
    wrong = _verify(pool, GEMM_SOFTMAX, AS_EAGER.replace("return F.softmax(logits * self.scale, dim=-1)",
                                                         "return F.softmax(logits * self.scale, dim=-1) * 1.2"))
    assert "more than 4x" in wrong.message and "would do that" not in wrong.message, wrong.message


def test_a_constant_output_is_no_finding_where_the_precision_itself_makes_it_constant(pool):
    v = _verify(pool, SIGMOID_SUM, SIGMOID_SUM_NEW)
    assert v.state is State.CORRECT, v.summary()
    assert not any("as accurate as PyTorch" in n for n in v.evidence.notes), v.summary()  # inside the tolerance


def test_a_constant_is_still_a_finding_where_the_models_own_output_varies():
    truth = torch.tensor([16380.0, 16390.0, 16402.0])
    constant = torch.full((3,), 16384.0, dtype=torch.bfloat16)
    check_degenerate(constant, truth, 0, native=truth.bfloat16())  # bf16 rounds all three to 16384: no finding
    with pytest.raises(Mismatch, match="is constant"):
        check_degenerate(constant, truth, 0, native=torch.tensor([16384.0, 16384.0, 16512.0]).bfloat16())
    with pytest.raises(Mismatch, match="is constant"):
        check_degenerate(constant, truth, 0)  # no reduced-precision output to go by (float32)


ARGMAX = '''
import torch
import torch.nn as nn

batch_size = 8
dim1 = 256
dim2 = 128


class Model(nn.Module):
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [1]
'''

ARGMAX_NEW = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.max(dim=self.dim).indices
'''


def test_an_integer_output_at_a_reduced_precision_is_compared_exactly(pool):
    """The tolerance from the output's size is for floating outputs; an argmax's indices were once fed to it and the
    worker failed (`runtime_error`) whatever the candidate."""
    for precision in ("bf16", "tf32"):
        v = _verify(pool, ARGMAX, ARGMAX_NEW, precision=precision)
        assert v.state is State.CORRECT and v.states["kernelbench"] == "correct", v.summary()
    wrong = ARGMAX_NEW.replace(".indices", ".indices.clamp(max=250)")
    v = _verify(pool, ARGMAX, wrong)
    assert v.state is State.NUMERICAL_MISMATCH and "integer elements differ" in v.message, v.summary()


# After KernelBench level 1's Matmul_with_large_K_dimension: sums of a quarter of K = 262144 products of uniform
# numbers run past fp16's largest value (65504) on the rows scaled up, so PyTorch's own fp16 result is inf there.
LARGE_K = '''
import torch
import torch.nn as nn

M = 8
N = 8
K = 262144


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.rand(M, K) * torch.linspace(0.25, 1.5, M).unsqueeze(1)
    B = torch.rand(K, N)
    return [A, B]


def get_init_inputs():
    return []
'''

LARGE_K_NEW = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        return (A.float() @ B.float()).to(A.dtype)  # float32 accumulation, rounded once
'''


def test_where_the_truth_is_beyond_fp16s_range_the_output_must_overflow_as_it_does(pool):
    v = _verify(pool, LARGE_K, LARGE_K_NEW, precision="fp16")
    assert v.state is State.CORRECT and v.states["kernelbench"] == "correct", v.summary()
    clamped = LARGE_K_NEW.replace(".to(A.dtype)", ".clamp(max=65504).to(A.dtype)")
    v = _verify(pool, LARGE_K, clamped, precision="fp16")
    assert v.state is State.NUMERICAL_MISMATCH and "beyond torch.float16's range" in v.message, v.summary()


LAYER_NORM = '''
import torch
import torch.nn as nn

batch_size = 64
dim = 2048


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''

# A training step as a model writes one: forward and backward by hand, in float32, rounded once at the end.
LAYER_NORM_STEP = '''
import torch
import torch.nn as nn


class LayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + eps)
        xhat = (xf - mean) * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return (xhat * weight.float() + bias.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        xhat, rstd, weight = ctx.saved_tensors
        g = grad_out.float()
        grad_weight = (g * xhat).sum(0)
        grad_bias = g.sum(0)
        gx = g * weight.float()
        grad_x = rstd * (gx - gx.mean(-1, keepdim=True) - xhat * (gx * xhat).mean(-1, keepdim=True))
        return grad_x.to(grad_out.dtype), grad_weight.to(weight.dtype), grad_bias.to(weight.dtype), None


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return LayerNormFn.apply(x, self.norm.weight, self.norm.bias, self.norm.eps)
'''


def test_a_float32_training_step_at_bf16_is_judged_against_the_truth_not_bf16_autograd(pool):
    """bf16 autograd's own LayerNorm weight gradient is 4-5% of its RMS from the float32 truth at its worst element; a step computed in
    float32 is within 4u of it, and was once a mismatch for differing from bf16 autograd."""
    problem = problem_from_source(LAYER_NORM, where="p.py", name="p")
    cfg = fast_config(require_kernel=False, precision="bf16", backward=True)
    v = Verifier(cfg, pool=pool).verify(problem, LAYER_NORM_STEP, "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert not any(n.startswith("the gradient of") for n in v.evidence.notes), v.summary()  # no allowance needed
    v = Verifier(cfg, pool=pool).verify(problem, LAYER_NORM.replace("class Model(", "class ModelNew(") +
                                        "\n\nModel = ModelNew\n", "cpu")
    assert v.state is State.CORRECT, v.summary()  # bf16 autograd itself: as accurate as it is
    # the textbook slip: the input gradient without its two mean terms
    slip = LAYER_NORM_STEP.replace("grad_x = rstd * (gx - gx.mean(-1, keepdim=True) - xhat * (gx * xhat).mean(-1, "
                                   "keepdim=True))", "grad_x = rstd * gx")
    v = Verifier(cfg, pool=pool).verify(problem, slip, "cpu")
    assert v.state is State.NUMERICAL_MISMATCH and "the gradient of input 0" in v.message, v.summary()
    assert "PyTorch's own is at most" in v.message, v.message


# An RMSNorm of inputs around 300: fp16's x * x passes 65504, the mean of squares is inf and PyTorch's own fp16
# result is 0 everywhere, while the float32 truth is the normalised input (RMS about 1).
LOUD_RMS_NORM = '''
import torch
import torch.nn as nn

batch_size = 16
features = 512


class Model(nn.Module):
    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(batch_size, features) * 100.0 + 300.0]  # every row holds squares past 65504


def get_init_inputs():
    return [features]
'''

# As a model writes it in half: the squares summed in the input's dtype, as PyTorch's own fp16 path does.
RMS_NORM_IN_HALF = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))

    def forward(self, x):
        ss = (x * x).sum(dim=-1, keepdim=True)  # accumulate in x.dtype
        return x * torch.rsqrt(ss / x.shape[-1] + self.eps) * self.weight
'''


def test_where_pytorchs_own_fp16_result_collapsed_to_a_constant_it_excuses_nothing(pool):
    """Its RMS error equalled the truth's size, which read as a truth 'zero but for rounding': a kernel writing zeros
    and one overflowing as PyTorch does were `correct` under the kforge rules."""
    for candidate in (RMS_NORM_IN_HALF, RMS_NORM_IN_HALF.replace("return x * torch.rsqrt", "return 0 * x * torch.rsqrt")):
        v = _verify(pool, LOUD_RMS_NORM, candidate, precision="fp16")
        assert v.state is State.NUMERICAL_MISMATCH and "which excuses nothing" in v.message, v.summary()
        assert v.states["kernelbench"] == "correct", v.summary()  # KernelBench compares with PyTorch's fp16 zeros
    in_float32 = RMS_NORM_IN_HALF.replace("ss = (x * x).sum(dim=-1, keepdim=True)  # accumulate in x.dtype",
                                          "x, dtype = x.float(), x.dtype\n        ss = (x * x).sum(dim=-1, keepdim=True)"
                                          ).replace("* self.weight\n", "* self.weight.float()).to(dtype)\n").replace(
        "return x * torch.rsqrt", "return (x * torch.rsqrt")
    v = _verify(pool, LOUD_RMS_NORM, in_float32, precision="fp16")
    assert v.state is State.CORRECT, v.summary()


# A GELU as models write one "for speed": the activation computed in half precision and cast back.
GELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)


batch_size = 64
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim) * 3]


def get_init_inputs():
    return []
'''

GELU_IN_HALF = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        h = x.to(torch.half)  # half precision is plenty for an activation
        return torch.nn.functional.gelu(h.float()).to(torch.half).to(x.dtype)
'''

MATMUL = GELU.replace("return torch.nn.functional.gelu(x)", "return x @ x.t()").replace("dim = 4096", "dim = 256")
# TF32 as a tensor core computes it: operands rounded to 10 mantissa bits, products summed in float32.
MATMUL_IN_TF32 = '''
import torch
import torch.nn as nn


def _tf32(t):
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


class ModelNew(nn.Module):
    def forward(self, x):
        a = _tf32(x)
        return a @ a.t()
'''


def test_at_tf32_only_matrix_products_may_round_as_tf32_does(pool):
    """TF32 changes matrix products and convolutions alone: an activation rounded to fp16 at ``--precision tf32``
    was correct under the kforge rules, the whole output held to TF32's unit roundoff."""
    v = _verify(pool, GELU, GELU_IN_HALF, precision="tf32")
    assert v.state is State.NUMERICAL_MISMATCH and v.states["kernelbench"] == "numerical_mismatch", v.summary()
    v = _verify(pool, MATMUL, MATMUL_IN_TF32, precision="tf32")
    assert v.state is State.CORRECT, v.summary()
    v = _verify(pool, MATMUL, MATMUL_IN_TF32, precision="fp32")
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()


WIDE_SOFTMAX = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 4
dim = 98304


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

# "Normalise by the running sum" with the sum taken 5% high: every value near 1e-5, far under the fixed 1e-4.
SOFTMAX_5PCT = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return e / (e.sum(dim=1, keepdim=True) * 1.05)
'''

SOFTMAX_OWN_WAY = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        shifted = x - x.amax(dim=1, keepdim=True)
        return torch.exp(shifted - torch.logsumexp(shifted, dim=1, keepdim=True))
'''


def test_at_fp32_outputs_far_under_the_absolute_tolerance_are_judged_at_their_own_size(pool):
    v = _verify(pool, WIDE_SOFTMAX, SOFTMAX_5PCT, precision="fp32")
    assert v.state is State.NUMERICAL_MISMATCH and v.states["kernelbench"] == "correct", v.summary()
    v = _verify(pool, WIDE_SOFTMAX, SOFTMAX_OWN_WAY, precision="fp32")
    assert v.state is State.CORRECT, v.summary()  # another order of the same float32 arithmetic


# A sum of positive terms (KernelBench's level-1 Sum reductions draw torch.rand): every output far from zero.
POSITIVE_SUM = '''
import torch
import torch.nn as nn

batch_size = 16
dim1 = 512
dim2 = 256
KFORGE = {"flops": "batch_size * dim1 * dim2"}  # one add per element, as the built-in suite declares it


class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
'''

# Two ways to be wrong that models write: a loop bound one block short, and a row count off by a few.
DROPS_ROWS = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        rows = x.shape[1] - x.shape[1] // 32  # "the tail is handled by the last block"
        return x[:, :rows].float().sum(dim=1, keepdim=True).to(x.dtype)
'''


def test_a_sum_of_positive_terms_missing_some_is_wrong_at_bf16(pool):
    """Its tolerance's absolute part came from the output's RMS, which for values all near 256 is their size: with
    the random-walk factor the kforge rules allowed 6% and passed a sum missing 3% of its terms, which KernelBench's
    1e-2 rejects. It comes from the spread about the mean now, and an honest float32-accumulated sum still passes."""
    p = problem_from_source(POSITIVE_SUM, where="sum.py", name="sum")
    verifier = Verifier(fast_config(precision="bf16", require_kernel=False, skip_timing=True), pool=pool)
    wrong = verifier.verify(p, DROPS_ROWS, "cpu")
    assert wrong.state is State.NUMERICAL_MISMATCH and wrong.states["kernelbench"] == "numerical_mismatch", \
        wrong.summary()
    honest = verifier.verify(p, DROPS_ROWS.replace("x.shape[1] - x.shape[1] // 32", "x.shape[1]"), "cpu")
    assert honest.state is State.CORRECT, honest.summary()


MATMUL_MNK = '''
import torch
import torch.nn as nn

M, K, N = 192, 1024, 160
KFORGE = {"flops": "2 * M * N * K"}


class Model(nn.Module):
    def forward(self, A, B):
        return A @ B


def get_inputs():
    return [torch.randn(M, K) * K ** -0.25, torch.randn(K, N) * K ** -0.25]


def get_init_inputs():
    return []
'''

# W8A8 as quantisation libraries write it: blocks of 32 along K, one scale each, integer products summed exactly.
INT8_GEMM = '''
import torch
import torch.nn as nn


def quantised(t, dim):
    blocks = t.float().unflatten(dim, (-1, 32))
    scale = blocks.abs().amax(dim=dim + 1 if dim >= 0 else dim, keepdim=True).clamp_min(1e-12) / 127
    return ((blocks / scale).round() * scale).flatten(dim, dim + 1 if dim >= 0 else dim)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return (quantised(A, 1) @ quantised(B, 0)).to(A.dtype)
'''


def test_an_int8_gemm_is_not_bf16_arithmetic(pool):
    """Its error was inside the bf16 tolerance while that grew with the reduction's length (about 5% of the
    output's spread at K = 1024), though 4.6x PyTorch's own: a bf16 GEMM accumulating in float32 errs by its
    output's rounding alone, whatever K is. The float32-accumulated product of the same inputs passes."""
    p = problem_from_source(MATMUL_MNK, where="mm.py", name="mm")
    verifier = Verifier(fast_config(precision="bf16", require_kernel=False, skip_timing=True), pool=pool)
    v = verifier.verify(p, INT8_GEMM, "cpu")
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()
    honest = INT8_GEMM.replace("(quantised(A, 1) @ quantised(B, 0))", "(A.float() @ B.float())")
    assert verifier.verify(p, honest, "cpu").state is State.CORRECT
