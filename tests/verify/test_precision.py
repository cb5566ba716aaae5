"""Precision as an axis (`kforge.precision`, docs/verification.md "Precision") and shape variants
(`kforge.verify.variants`): the rules on a CPU, with kernels written as models write them."""

import math

import pytest

from kforge.precision import PRECISIONS, get_precision, reduction_length, tolerance
from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from kforge.verify.rules import decide
from kforge.verify.variants import shape_variants, size_constants
from kforge.verify.verdict import Facets
from tests.helpers import fast_config

PROBLEM = '''
import torch
import torch.nn as nn

batch_size = 128
in_features = 512
out_features = 256


class Model(nn.Module):
    """A projection without bias: y = x W^T."""
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        return self.proj(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

# Written as a model writes a bf16 kernel: storage in bf16, the dot product accumulated in float.
BF16_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = """
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor proj_bf16(torch::Tensor x, torch::Tensor w) {
    TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, "expects bf16");
    auto xc = x.contiguous(); auto wc = w.contiguous();
    const int64_t rows = xc.size(0), k = xc.size(1), cols = wc.size(0);
    auto y = torch::empty({rows, cols}, xc.options());
    const at::BFloat16* xp = xc.data_ptr<at::BFloat16>();
    const at::BFloat16* wp = wc.data_ptr<at::BFloat16>();
    at::BFloat16* yp = y.data_ptr<at::BFloat16>();
    at::parallel_for(0, rows, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                float acc = 0.f;   // fp32 accumulator, bf16 storage
                for (int64_t i = 0; i < k; ++i)
                    acc += static_cast<float>(xp[r * k + i]) * static_cast<float>(wp[c * k + i]);
                yp[r * cols + c] = static_cast<at::BFloat16>(acc);
            }
    });
    return y;
}
"""

_ext = load_inline(name="proj_bf16_ext", cpp_sources=cpp_src, functions=["proj_bf16"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        return _ext.proj_bf16(x, self.proj.weight)
'''

# The sizes it was shown, compiled in: right at them, wrong anywhere else.
BAKED_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
constexpr int64_t B = 128, IN = 512, OUT = 256;   // problem sizes
torch::Tensor fwd(torch::Tensor x, torch::Tensor w) {
    auto y = torch::zeros({B, OUT}, x.options());
    auto X = x.accessor<float, 2>(); auto W = w.accessor<float, 2>(); auto Y = y.accessor<float, 2>();
    for (int64_t b = 0; b < B && b < x.size(0); ++b)
        for (int64_t o = 0; o < OUT && o < w.size(0); ++o) {
            float s = 0;
            for (int64_t i = 0; i < IN && i < x.size(1); ++i) s += X[b][i] * W[o][i];
            Y[b][o] = s;
        }
    return y;
}
"""
mod = load_inline("baked_proj", cpp_sources=[src], functions=["fwd"])

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)
    def forward(self, x):
        return mod.fwd(x, self.proj.weight)
'''


# Sizes compiled in and asserted, as models often guard them: the process aborts (SIGABRT) at any other size.
ASSERTED_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
#include <cassert>

#define BATCH 128
#define IN_F 512
#define OUT_F 256

torch::Tensor linear_forward(torch::Tensor x, torch::Tensor weight) {
    assert(x.size(0) == BATCH && x.size(1) == IN_F && weight.size(0) == OUT_F);
    auto out = torch::empty({BATCH, OUT_F}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int b = 0; b < BATCH; b++) {
        for (int o = 0; o < OUT_F; o++) {
            float sum = 0.0f;
            for (int i = 0; i < IN_F; i++) sum += xp[b * IN_F + i] * wp[o * IN_F + i];
            op[b * OUT_F + o] = sum;
        }
    }
    return out;
}
"""

linear_ext = load_inline(name="linear_asserted", cpp_sources=cpp_source, functions=["linear_forward"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super(ModelNew, self).__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        return linear_ext.linear_forward(x.contiguous(), self.proj.weight.contiguous())
'''


@pytest.fixture(scope="module")
def problem():
    return problem_from_source(PROBLEM, where="proj.py", name="proj")


def test_the_tolerance_follows_the_unit_roundoff_and_grows_with_the_reduction_at_tf32_alone():
    """At bf16 the inputs are the precision's already: a float32 accumulator errs by the output's rounding, however
    long the sum; at tf32 each product rounds its float32 operands, and a longer sum errs more."""
    bf16, tf32 = get_precision("bf16"), get_precision("tf32")
    atol1, rtol1 = tolerance(bf16, 1, 1.0)
    atol2, rtol2 = tolerance(bf16, 4096, 1.0)
    assert rtol1 == rtol2 == 4 * 2 ** -8 and atol2 == atol1 == rtol1
    assert tolerance(tf32, 4096, 1.0)[0] == pytest.approx(tolerance(tf32, 1, 1.0)[0] * math.sqrt(13))
    assert tolerance(get_precision("fp16"), 1, 1.0)[1] == 4 * 2 ** -11 < rtol1
    assert reduction_length(2 * 64 * 256 * 512, 64 * 256) == 512 and reduction_length(None, 10) == 1
    assert PRECISIONS["bf16"].kernelbench_tol == 1e-2 and PRECISIONS["fp32"].kernelbench_tol == 1e-4
    # a truth below fp16's smallest subnormal (x * 1e-9) rounds to zero: correctly rounded, it errs by that much
    assert tolerance(get_precision("fp16"), 1, 1e-9)[0] == 2.0 ** -24
    with pytest.raises(ValueError, match="choose from fp32, tf32, bf16, fp16"):
        get_precision("fp8")


def test_variants_change_sizes_not_axes_or_kernel_geometry():
    p = problem_from_source(PROBLEM.replace("out_features = 256", "out_features = 256\ndim = 1\nkernel_size = 3"),
                            where="p.py", name="p")
    assert set(size_constants(p)) == {"batch_size", "in_features", "out_features"}
    variants = shape_variants(p)
    assert [set(v.overrides) for v in variants] == [{"batch_size", "in_features", "out_features"}, {"batch_size"},
                                                    {"batch_size", "in_features", "out_features"}]
    for v in variants[:2]:
        for name, value in v.overrides.items():
            assert value < p.constants[name] and value % 16 and value % 2  # smaller, odd, not tile-sized
            assert f"{name} = {value}" in v.source
    # a sixteenth larger: a loop bounded by the sizes it was shown leaves rows and columns out
    assert variants[2].overrides == {"batch_size": 137, "in_features": 545, "out_features": 273}
    declared = shape_variants(p, [{"batch_size": 7}])
    assert [v.overrides for v in declared] == [{"batch_size": 7}]


def test_a_dim_that_is_a_row_length_is_varied_and_one_that_is_an_axis_is_not():
    """KernelBench names both ``dim``: its softmax, norms, activations and losses size their rows with it
    (``batch_size = 4096; dim = 393216``), its reductions and scans pick an axis with it (``dim = 1``). A kernel
    that baked the row length in (``x.view(-1, 1024)``) must meet a variant that changes it."""
    softmax = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
               "        return torch.softmax(x, dim=1)\n\n\nbatch_size = 64\ndim = 1024\n\n\n"
               "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")
    rows = problem_from_source(softmax, where="softmax.py", name="softmax")
    assert size_constants(rows) == {"batch_size": 64, "dim": 1024}
    assert [v.overrides for v in shape_variants(rows)] == [{"batch_size": 47, "dim": 767}, {"batch_size": 31},
                                                          {"batch_size": 69, "dim": 1089}]
    scan = softmax.replace("dim = 1024", "dim = 1").replace("(batch_size, dim)", "(batch_size, 4000)")
    assert size_constants(problem_from_source(scan, where="scan.py", name="scan")) == {"batch_size": 64}


def test_the_depth_of_a_volume_and_einsum_letters_are_sizes():
    """KernelBench's 3-D convolutions and pools size their volume with ``depth``, beside ``height`` and ``width``;
    its tensor contractions name their sizes by letter (``b, i, j, l, k``)."""
    conv3d = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self, c, o, k):\n"
              "        super().__init__()\n        self.conv = nn.Conv3d(c, o, k)\n\n    def forward(self, x):\n"
              "        return self.conv(x)\n\n\nbatch_size = 16\nin_channels = 3\nout_channels = 64\n"
              "kernel_size = 3\ndepth = 64\nwidth = 64\nheight = 64\n\n\ndef get_inputs():\n"
              "    return [torch.randn(batch_size, in_channels, depth, height, width)]\n\n\n"
              "def get_init_inputs():\n    return [in_channels, out_channels, kernel_size]\n")
    p = problem_from_source(conv3d, where="conv3d.py", name="conv3d")
    assert set(size_constants(p)) == {"batch_size", "out_channels", "depth", "width", "height"}
    pairs = conv3d.replace("depth = 64\nwidth = 64\nheight = 64", "depth = width = 64\nheight, groups = 64, 1")
    chained = problem_from_source(pairs, where="pairs.py", name="pairs")
    assert set(size_constants(chained)) == {"batch_size", "out_channels", "depth", "width", "height"}
    # equal sizes move apart at three quarters (a kernel that takes the volume for a cube fails there)
    assert "depth = 45; width = 43\nheight, groups = 41, 1\n" in shape_variants(chained)[0].source
    letters = conv3d.replace("batch_size = 16\nin_channels = 3\nout_channels = 64\nkernel_size = 3\n"
                             "depth = 64\nwidth = 64\nheight = 64", "b = 8\ni = 256\nj = 512\nl = 256\nk = 768")
    assert set(size_constants(problem_from_source(letters, where="t.py", name="t"))) == {"b", "i", "j", "l", "k"}


def test_a_width_the_head_count_must_divide_falls_back_to_sizes_it_divides(pool):
    """47 is no width for 8 heads: the reference fails there, and the variant runs at odd multiples of 24
    instead of being lost (a note says so); a kernel that baked the width in fails there."""
    attention = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                 "    def __init__(self, dim, heads):\n        super().__init__()\n"
                 "        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)\n\n"
                 "    def forward(self, x):\n        return self.attn(x, x, x, need_weights=False)[0]\n\n\n"
                 "batch_size = 1\nseq_len = 40\ndim = 64\nheads = 8\n\n\n"  # a batch of 1: not varied
                 "def get_inputs():\n    return [torch.randn(batch_size, seq_len, dim)]\n\n\n"
                 "def get_init_inputs():\n    return [dim, heads]\n")
    p = problem_from_source(attention, where="attention.py", name="attention")
    first = shape_variants(p)[0]
    assert first.overrides == {"seq_len": 29, "dim": 47} and first.fallbacks[:2] == [{"seq_len": 24, "dim": 72},
                                                                                     {"seq_len": 24, "dim": 24}]
    larger = shape_variants(p)[2]  # rounded up, so that it stays larger than the problem
    assert larger.overrides == {"seq_len": 43, "dim": 69} and larger.fallbacks[:2] == [{"seq_len": 72, "dim": 120},
                                                                                      {"seq_len": 72, "dim": 72}]
    wide = problem_from_source(attention.replace("dim = 64\nheads = 8", "dim = 1024\nheads = 16"), where="w.py",
                               name="wide")
    assert shape_variants(wide)[0].fallbacks[0] == {"seq_len": 29, "dim": 720}  # 720 = 15 * 48: 16 heads of 45
    baked = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
             "    def __init__(self, dim, heads):\n        super().__init__()\n"
             "        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)\n\n"
             "    def forward(self, x):\n        y = self.attn(x, x, x, need_weights=False)[0]\n"
             "        return y.reshape(-1, 40, 64)\n")
    verifier = Verifier(fast_config(variants=True, require_kernel=False), pool=pool)
    v = verifier.verify(p, baked, "cpu")
    assert v.state is State.RUNTIME_ERROR and "on shape variant seq_len=24, dim=72" in v.summary(), v.summary()
    fine = verifier.verify(p, baked.replace("y.reshape(-1, 40, 64)", "y"), "cpu")
    assert fine.state is State.CORRECT, fine.summary()
    assert any("seq_len=24, dim=72 (for seq_len=29, dim=47, where the reference fails); seq_len=19; seq_len=72, "
               "dim=120 (for seq_len=43, dim=69, where the reference fails)" in n
               for n in fine.evidence.notes), fine.evidence.notes  # the note docs/verification.md quotes
    assert not any("skipped" in n for n in fine.evidence.notes), fine.evidence.notes


@pytest.mark.parametrize("facets,kforge,kernelbench", [
    (Facets("correct", kb_outcome="numerical_mismatch", kb_message="outside 1e-2"), "correct", "numerical_mismatch"),
    (Facets("numerical_mismatch", kb_outcome="correct"), "numerical_mismatch", "correct"),
    (Facets("correct", variant_outcome="shape_mismatch", variant_message="on shape variant batch_size=95"),
     "shape_mismatch", "correct"),
    (Facets("cheat_detected", outcome_rule="input_mutation"), "cheat_detected", "cheat_detected"),
])
def test_each_rule_set_reads_its_own_numerics_and_only_kforge_asks_for_the_variants(facets, kforge, kernelbench):
    assert decide(facets, "kforge", require_kernel=False).state.value == kforge
    assert decide(facets, "kernelbench").state.value == kernelbench


def test_a_bf16_kernel_is_correct_at_bf16_against_the_float32_truth(pool, problem):
    cfg = fast_config(precision="bf16", variants=True)
    v = Verifier(cfg, pool=pool).verify(problem, BF16_KERNEL, "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert v.precision == "bf16" and v.states["kernelbench"] == "correct"
    assert any("shape variant" in n for n in v.evidence.notes), v.summary()  # right at sizes it was not shown


def test_the_same_bf16_kernel_in_an_fp32_problem_is_a_silent_downgrade(pool, problem):
    """At fp32 its inputs stay float32, so a kernel that insists on bf16 fails; one that casts to bf16 inside to
    go faster is outside fp32's tolerance under both rule sets."""
    downgrade = BF16_KERNEL.replace("return _ext.proj_bf16(x, self.proj.weight)",
                                    "return _ext.proj_bf16(x.bfloat16(), self.proj.weight.bfloat16()).float()")
    v = Verifier(fast_config(), pool=pool).verify(problem, downgrade, "cpu")
    assert v.state is State.NUMERICAL_MISMATCH and v.states["kernelbench"] == "numerical_mismatch", v.summary()
    # Which precision it computed in is measured from its error, not guessed from its source.
    assert "that of about 8-bit arithmetic (float32 carries 24, bf16 8)" in v.message, v.message
    assert 7 <= v.evidence.mismatch["significant_bits"] <= 9, v.evidence.mismatch
    wrong = BF16_KERNEL.replace("return _ext.proj_bf16(x, self.proj.weight)",
                                "return _ext.proj_bf16(x.bfloat16(), self.proj.weight.bfloat16()).float() * 1.1")
    v = Verifier(fast_config(), pool=pool).verify(problem, wrong, "cpu")
    assert v.state is State.NUMERICAL_MISMATCH and "arithmetic" not in v.message, v.message  # merely wrong


def test_sizes_baked_in_fail_the_kforge_rules_on_a_variant_and_pass_kernelbenchs(pool, problem):
    v = Verifier(fast_config(variants=True), pool=pool).verify(problem, BAKED_KERNEL, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is State.SHAPE_MISMATCH and v.states["strict"] == "shape_mismatch", v.summary()
    assert "on shape variant batch_size=95" in v.message and "(128, 256)" in v.message, v.message


def test_a_kernel_that_crashes_on_a_variant_is_told_which_shape_killed_it(pool, problem):
    v = Verifier(fast_config(variants=True), pool=pool).verify(problem, ASSERTED_KERNEL, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is State.RUNTIME_ERROR, v.summary()
    assert "SIGABRT" in v.message and "shape variant batch_size=95, in_features=383, out_features=191" in v.message, \
        v.message


def test_a_float_kernel_at_bf16_is_told_what_the_precision_made_its_tensors(pool, problem):
    """"expected scalar type Float but found BFloat16" said nothing of the precision the problem was run at."""
    as_float = BF16_KERNEL.replace('    TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16, '
                                   '"expects bf16");\n', "").replace("at::BFloat16", "float").replace(
        "static_cast<float>(acc)", "acc").replace("proj_bf16_ext", "proj_f32_ext")
    v = Verifier(fast_config(precision="bf16"), pool=pool).verify(problem, as_float, "cpu")
    assert v.state is State.RUNTIME_ERROR and "expected scalar type Float" in v.message, v.summary()
    assert "the problem runs at bf16: its inputs, parameters and buffers are bfloat16" in v.message, v.message


def test_a_candidates_own_dtype_check_reads_as_a_dtype_failure():
    """``TORCH_CHECK(a.dtype() == torch::kFloat32, "A must be a float32 tensor")`` failed at bf16 with no word of the
    precision the problem ran at; PyTorch's own wording had the hint."""
    from kforge.sandbox.harness import Harness
    for said in ("A must be a float32 tensor", "expects kFloat input", "input must be float", "expected scalar type "
                 "Float but found BFloat16"):
        assert Harness._DTYPES.search(said), said
    assert not Harness._DTYPES.search("index 4096 is out of bounds for dimension 0 with size 4096")


def test_an_output_left_in_float32_at_bf16_is_told_to_cast_it_back(pool, problem):
    """Upcast, computed in float32, and returned without the cast back: the output's dtype is wrong under both rule
    sets (KernelBench's allclose raises on it), and the message says the fix."""
    upcast = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def __init__(self, in_features, out_features):\n        super().__init__()\n"
              "        self.proj = nn.Linear(in_features, out_features, bias=False)\n\n"
              "    def forward(self, x):\n        return x.float() @ self.proj.weight.float().t()\n")
    v = Verifier(fast_config(precision="bf16", require_kernel=False, skip_timing=True), pool=pool).verify(
        problem, upcast, "cpu")
    assert v.state is State.SHAPE_MISMATCH and v.states["kernelbench"] == "shape_mismatch", v.summary()
    assert "has dtype torch.float32, expected torch.bfloat16: give it back" in v.message, v.message


# A problem whose own tensors are bf16 (a user's workload as it runs), judged as the file is.
BF16_FILE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(dim)).to(torch.bfloat16))

    def forward(self, x, g):
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
        return x * rms * self.weight * F.silu(g)


batch_size = 64
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16), torch.randn(batch_size, dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return [dim]
'''

# Computed in float32 and rounded once: closer to the truth than PyTorch's bf16 path, which rounds each step.
ROUNDED_ONCE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.bfloat16))

    def forward(self, x, g):
        xf = x.float()
        rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
        return (xf * rms * self.weight.float() * F.silu(g.float())).to(x.dtype)
'''


def test_a_problem_held_in_bf16_is_judged_as_at_bf16(pool):
    """At the default precision a bf16 file ran as it is, and a kernel more exact than PyTorch's own bf16 result was a
    mismatch against it ("about 7-bit arithmetic"): it is now judged against a float32 truth at bf16's tolerance."""
    p = problem_from_source(BF16_FILE, where="bf16_file.py", name="bf16_file")
    v = Verifier(fast_config(require_kernel=False, skip_timing=True), pool=pool).verify(p, ROUNDED_ONCE, "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert any("inputs and parameters are bfloat16: judged as at --precision bf16" in n for n in v.evidence.notes)
    wrong = ROUNDED_ONCE.replace("+ 1e-6)", "+ 1e-6) * 1.05")
    assert Verifier(fast_config(require_kernel=False, skip_timing=True), pool=pool).verify(
        p, wrong, "cpu").state is State.NUMERICAL_MISMATCH


QUANTIZE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.round(x * 1000).to(torch.int64)


batch_size = 64
dim = 1024


def get_inputs():
    return [torch.rand(batch_size, dim) * 0.5 + 0.5]


def get_init_inputs():
    return []
'''

QUANTIZE_IN_FP32 = QUANTIZE.replace("class Model(", "class ModelNew(").replace("x * 1000", "x.float() * 1000")


def test_integer_outputs_under_the_kernelbench_rules_are_judged_by_its_allclose(pool):
    """KernelBench's allclose at 1e-2 passes 957 for 956; its rules here compared the integers exactly and failed a
    quantizer that rounds in float32 where PyTorch's bf16 path rounds in bf16. The kforge rules judge it against the
    float32 truth, which it matches exactly."""
    p = problem_from_source(QUANTIZE, where="quantize.py", name="quantize")
    v = Verifier(fast_config(precision="bf16", require_kernel=False, skip_timing=True), pool=pool).verify(
        p, QUANTIZE_IN_FP32, "cpu")
    assert v.state is State.CORRECT and v.states["kernelbench"] == "correct", v.summary()


@pytest.mark.parametrize("op, shape", [("torch.linalg.det(x)", "batch_size, 8, 8"),
                                       ("torch.fft.ifft(torch.fft.fft(x, dim=-1), dim=-1).real", "batch_size, dim")])
def test_a_problem_with_no_kernel_at_the_precision_is_told_so(pool, op, shape):
    """``torch.linalg.det`` has no bf16 kernel on a CPU ("not implemented for 'BFloat16'"), nor has an FFT
    ("Unsupported dtype BFloat16"): "this is a bug in the problem" said nothing of the precision that made it fail."""
    det = QUANTIZE.replace("return torch.round(x * 1000).to(torch.int64)", f"return {op}").replace(
        "torch.rand(batch_size, dim) * 0.5 + 0.5", f"torch.randn({shape})")
    p = problem_from_source(det, where="det.py", name="det")
    with pytest.raises(Exception, match="no bf16 kernel for one of the problem's operators") as err:
        Verifier(fast_config(precision="bf16", require_kernel=False, skip_timing=True), pool=pool).verify(
            p, det.replace("class Model(", "class ModelNew("), "cpu")
    assert "--precision fp32" in str(err.value)


CLASSIFY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, classes):
        super().__init__()
        self.head = nn.Linear(in_features, classes)

    def forward(self, x):
        return self.head(x).argmax(dim=-1)


batch_size = 512
in_features = 512
classes = 1000


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, classes]
'''


def test_an_argmax_of_bf16_logits_may_differ_from_the_truths_where_pytorchs_own_does(pool):
    """Logits bit for bit PyTorch's own at bf16 pick another class than the float32 truth's at a few near-ties, as
    PyTorch's own bf16 model does: compared exactly, that was a mismatch no bf16 kernel could avoid."""
    p = problem_from_source(CLASSIFY, where="classify.py", name="classify")
    same = CLASSIFY.replace("class Model(", "class ModelNew(")
    v = Verifier(fast_config(precision="bf16", require_kernel=False, skip_timing=True), pool=pool).verify(p, same, "cpu")
    assert v.state is State.CORRECT, v.summary()
    shuffled = same.replace(".argmax(dim=-1)", ".argmax(dim=-1).roll(1)")  # wrong everywhere: no near-ties
    assert Verifier(fast_config(precision="bf16", require_kernel=False, skip_timing=True), pool=pool).verify(
        p, shuffled, "cpu").state is State.NUMERICAL_MISMATCH


def test_a_kforge_run_says_where_kernelbench_would_cast_an_input_it_does_not(pool):
    """KernelBench casts every input to the precision, a cross-entropy's int64 targets too (its own reference then
    fails): a kforge-rules run judges its kernelbench view on the inputs as kforge gives them, and says so."""
    xent = QUANTIZE.replace("return torch.round(x * 1000).to(torch.int64)",
                            "return torch.nn.functional.cross_entropy(x, t)").replace(
        "def forward(self, x):", "def forward(self, x, t):").replace(
        "return [torch.rand(batch_size, dim) * 0.5 + 0.5]",
        "return [torch.randn(batch_size, dim), torch.randint(0, dim, (batch_size,))]")
    p = problem_from_source(xent, where="xent.py", name="xent")
    v = Verifier(fast_config(precision="bf16", require_kernel=False, skip_timing=True), pool=pool).verify(
        p, xent.replace("class Model(", "class ModelNew("), "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert any("casts every input to bfloat16, its int64 ones too" in n for n in v.evidence.notes), v.evidence.notes


def test_tf32_on_a_cpu_says_that_only_the_tolerance_is_tf32s(pool):
    p = problem_from_source(QUANTIZE.replace("torch.round(x * 1000).to(torch.int64)", "x @ x.t()"),
                            where="gram.py", name="gram")
    v = Verifier(fast_config(precision="tf32", require_kernel=False, skip_timing=True), pool=pool).verify(
        p, QUANTIZE.replace("class Model(", "class ModelNew(").replace("torch.round(x * 1000).to(torch.int64)",
                                                                         "x @ x.t()"), "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert any(n.startswith("tf32 on a CPU: PyTorch runs no TF32 there") for n in v.evidence.notes), v.evidence.notes


def test_a_reference_its_forward_promotes_to_float32_is_told_as_such_not_to_return_the_inputs_dtype(pool):
    """``x + torch.randn(x.shape)`` at bf16 is float32: the hint said to give the output back in the input's dtype,
    which is what the candidate had done."""
    src = ("import torch\nimport torch.nn as nn\n\nbatch_size = 16\ndim = 64\n\n\nclass Model(nn.Module):\n"
           "    def forward(self, x):\n        return x * torch.ones(x.shape)\n\n\ndef get_inputs():\n"
           "    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")
    cand = src.replace("class Model(", "class ModelNew(").replace("torch.ones(x.shape)", "1.0")
    v = Verifier(fast_config(require_kernel=False, skip_timing=True, precision="bf16"), pool=pool).verify(
        problem_from_source(src, where="p.py", name="p"), cand, "cpu")
    assert v.state is State.SHAPE_MISMATCH, v.summary()
    assert "the reference's output is float32 although its inputs are not" in v.message and "x.dtype" not in v.message
