"""Shape variants (`kforge.verify.variants`) against the ways models bake in sizes: literals in a problem with no
size constants (``torch.randn(16, 1024)`` in ``get_inputs``), and loops or grids sized for the problem and guarded
by the real size, right at every smaller variant (the precision side is tests/verify/test_precision.py)."""

import pytest

from kforge.backends import get_backend
from kforge.problems import problem_from_source, resolve_problem
from kforge.verify import State, Verifier
from kforge.verify.variants import describe, literal_sizes, shape_variants, size_constants
from tests.helpers import fast_config

# A problem as people write one by hand: the sizes in the calls, a seed and an axis beside them.
LITERAL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=-1)


def get_inputs():
    torch.manual_seed(1234)
    return [torch.randn(16, 1024)]


def get_init_inputs():
    return [1024, 512]
'''

# The way a model bakes what it was shown: the batch and widths as literals in its forward.
BAKED = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        out = torch.empty(16, 512)
        logits = torch.addmm(self.fc.bias, x.view(16, 1024), self.fc.weight.t())
        out.copy_(logits.softmax(dim=1))
        return out
'''


def test_sizes_written_as_literals_are_the_variants_sizes():
    p = problem_from_source(LITERAL, where="lit.py", name="lit")
    assert [n.value for n in literal_sizes(p.source)] == [16, 1024, 1024, 512]  # not the seed
    first, batch, larger = shape_variants(p)
    assert first.overrides == {"16": 11, "1024": 767, "512": 383} and batch.overrides == {"16": 7}
    assert larger.overrides == {"16": 17, "1024": 1089, "512": 545} and "torch.randn(17, 1089)" in larger.source
    assert "torch.randn(11, 767)" in first.source and "return [767, 383]" in first.source
    assert "manual_seed(1234)" in first.source and "dim=-1" in first.source
    assert "torch.randn(7, 1024)" in batch.source and "return [1024, 512]" in batch.source
    # tried if the reference fails: 16 may be a head count (under the step of 24), so it stays and joins the step
    assert first.fallbacks[0] == {"16": 16, "1024": 720, "512": 336}


def test_a_file_with_size_constants_varies_the_literal_sizes_beside_them():
    """A constant for the batch and a literal for the row (``torch.randn(batch_size, 1024)``): the literal was kept,
    so a kernel with its row length baked in passed every variant."""
    named = LITERAL.replace("torch.randn(16, 1024)", "torch.randn(batch_size, 1024)") + "\nbatch_size = 64\n"
    p = problem_from_source(named, where="named.py", name="named")
    first, batch, larger = shape_variants(p)
    assert first.overrides == {"batch_size": 47, "1024": 767, "512": 383} and batch.overrides == {"batch_size": 31}
    assert larger.overrides == {"batch_size": 69, "1024": 1089, "512": 545}
    assert "torch.randn(batch_size, 1089)" in larger.source and "return [1089, 545]" in larger.source
    assert "batch_size = 69" in larger.source
    assert first.fallbacks[0] == {"batch_size": 47}  # a model that fixes the literal's size in its layers runs there
    assert describe(first.overrides) == "batch_size=47, 1024->767, 512->383"


def test_a_kernel_with_literal_sizes_baked_in_fails_the_kforge_rules_only(pool):
    p = problem_from_source(LITERAL, where="lit.py", name="lit")
    verifier = Verifier(fast_config(variants=True, require_kernel=False), pool=pool)
    v = verifier.verify(p, BAKED, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is not State.CORRECT, v.summary()
    assert "on shape variant 16->11, 1024->767, 512->383 (literal sizes)" in v.message, v.message
    generic = BAKED.replace("torch.empty(16, 512)", "torch.empty(x.shape[0], self.fc.out_features)")
    fine = verifier.verify(p, generic.replace("x.view(16, 1024)", "x"), "cpu")
    assert fine.state is State.CORRECT, fine.summary()
    assert any("16->11, 1024->767, 512->383 (literal sizes); 16->7 (literal sizes); 16->17, 1024->1089, 512->545 (literal "
               "sizes)" in n
               for n in fine.evidence.notes), fine.evidence.notes


# Rows bounded by the batch it was shown, reads guarded as models guard them: right at every smaller batch.
ROWS_BAKED = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>

constexpr int BATCH = 16;  // batch_size from the problem

torch::Tensor softmax_rows(torch::Tensor x) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const int64_t cols = x.size(1);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int r = 0; r < BATCH && r < x.size(0); ++r) {
        float m = -INFINITY, s = 0.f;
        for (int64_t c = 0; c < cols; ++c) m = std::max(m, in[r * cols + c]);
        for (int64_t c = 0; c < cols; ++c) s += std::exp(in[r * cols + c] - m);
        for (int64_t c = 0; c < cols; ++c) o[r * cols + c] = std::exp(in[r * cols + c] - m) / s;
    }
    return out;
}
"""

softmax_ext = load_inline(name="softmax_rows_ext", cpp_sources=cpp_source, functions=["softmax_rows"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return softmax_ext.softmax_rows(x)
'''


def test_a_loop_bounded_by_the_batch_it_was_shown_fails_at_the_larger_variant(pool):
    """Every other variant is smaller, where the guarded loop is right."""
    p = problem_from_source(SOFTMAX, where="softmax.py", name="softmax")
    v = Verifier(fast_config(variants=True), pool=pool).verify(p, ROWS_BAKED, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is State.NUMERICAL_MISMATCH and "on shape variant batch_size=17, dim=273" in v.message, v.summary()
    # The row left unwritten reads as NaN, as in the primary trials, not as whatever the allocator had there.
    assert "273 NaN/Inf value(s) where the reference is finite (NaN: output elements left unwritten" in v.message, v.message


SOFTMAX = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return torch.softmax(x, dim=1)\n\n\nbatch_size = 16\ndim = 256\n\n\n"
           "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")

# Memory saved on inputs larger than the one it was shown: the big case works in place on its input.
IN_PLACE_WHEN_LARGE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.numel() > 16 * 256:
            # large inputs: normalise in place rather than allocate a second buffer
            x.sub_(x.amax(dim=1, keepdim=True)).exp_()
            return x.div_(x.sum(dim=1, keepdim=True))
        return torch.softmax(x, dim=1)
"""


def test_a_candidate_that_writes_its_input_only_at_a_larger_size_is_caught_at_that_variant(pool):
    p = problem_from_source(SOFTMAX, where="softmax.py", name="softmax")
    v = Verifier(fast_config(variants=True, require_kernel=False), pool=pool).verify(p, IN_PLACE_WHEN_LARGE, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()  # KernelBench's harness sees the problem's shape only
    assert v.state is State.CHEAT_DETECTED, v.summary()
    assert "on shape variant batch_size=17, dim=273: the candidate modified input 0 in place" in v.message, v.message


# KernelBench's scans and losses give the row length as a shape: ``torch.rand(batch_size, *input_shape)``.
SCAN = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


batch_size = 16
input_shape = (4000,)
dim = 1
bias_shape = (batch_size, 1)
kernel_size = (3, 5)


def get_inputs():
    return [torch.rand(batch_size, *input_shape)]


def get_init_inputs():
    return [dim]
"""

# A blocked scan with a carry, its loop bounded by the row length it was shown: right at any shorter row.
SCAN_BAKED = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        out = torch.empty_like(x)
        carry = torch.zeros(x.shape[0], 1, dtype=x.dtype, device=x.device)
        for start in range(0, 4000, 1024):  # ROW_LEN = input_shape[0]
            scanned = torch.cumsum(x[:, start:start + 1024], dim=1) + carry
            out[:, start:start + 1024] = scanned
            carry = scanned[:, -1:]
        return out
"""


def test_a_shape_written_as_a_tuple_of_numbers_is_varied_with_the_sizes():
    p = problem_from_source(SCAN, where="scan.py", name="scan")
    # a tuple written with names follows the sizes it names; kernel geometry is no size
    assert size_constants(p) == {"batch_size": 16, "input_shape": (4000,)}
    first, _, larger = shape_variants(p)
    assert first.overrides == {"batch_size": 11, "input_shape": (2999,)} and "input_shape = (2999,)" in first.source
    assert larger.overrides == {"batch_size": 17, "input_shape": (4251,)}
    assert first.fallbacks[0] == {"batch_size": 11, "input_shape": (2952,)}


def test_a_scan_baked_to_the_row_length_it_was_shown_fails_the_kforge_rules_only(pool):
    p = problem_from_source(SCAN, where="scan.py", name="scan")
    v = Verifier(fast_config(variants=True, require_kernel=False), pool=pool).verify(p, SCAN_BAKED, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()
    assert "on shape variant batch_size=17, input_shape=(4251,)" in v.message, v.message


# One square shape as a tuple: scaling it whole keeps it square, so only its first side alone tells a kernel that
# took the rows' count for the columns'.
SQUARE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.t().contiguous()


input_shape = (96, 96)


def get_inputs():
    return [torch.randn(*input_shape)]


def get_init_inputs():
    return []
"""

SQUARE_BAKED = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        n = x.size(0)  # square matrix
        out = torch.empty(n, n)
        for i in range(n):
            out[:, i] = x[i, :n]
        return out
"""


def test_a_lone_square_shape_is_varied_in_its_first_side_alone():
    p = problem_from_source(SQUARE, where="square.py", name="square")
    assert [v.overrides for v in shape_variants(p)] == [{"input_shape": (71, 71)}, {"input_shape": (47, 96)},
                                                        {"input_shape": (103, 103)}]


def test_a_transpose_that_takes_its_input_for_square_fails_at_the_halved_side(pool):
    p = problem_from_source(SQUARE, where="square.py", name="square")
    v = Verifier(fast_config(variants=True, require_kernel=False), pool=pool).verify(p, SQUARE_BAKED, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is not State.CORRECT and "input_shape=(47, 96)" in v.message, v.summary()


# The grid computed from the sizes the model was shown, the loads and stores masked by the real count.
GRID_BAKED = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        BLOCK_SIZE = 1024
        grid = (16 * 4096 // BLOCK_SIZE,)  # BATCH * DIM / BLOCK_SIZE
        relu_kernel[grid](x, out, x.numel(), BLOCK_SIZE=BLOCK_SIZE)
        return out
"""


def test_a_grid_sized_for_the_problem_and_masked_passes_every_smaller_variant_and_not_the_larger(pool):
    pytest.importorskip("triton")
    problem = resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 16, "DIM": 4096})
    v = Verifier(fast_config(variants=True), pool=pool).verify(problem, GRID_BAKED, get_backend("triton", device="cpu"))
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is State.NUMERICAL_MISMATCH and "on shape variant BATCH=17, DIM=4353" in v.message, v.summary()


def test_a_head_count_written_as_a_literal_keeps_its_value_in_the_fallback(pool):
    """Literals have no names to tell a head count by: in the fallback, values under the step keep theirs and the
    widths become multiples of them, so an attention block written with literals keeps its combined variant."""
    attention = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                 "    def __init__(self, dim, heads):\n        super().__init__()\n"
                 "        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)\n\n"
                 "    def forward(self, x):\n        return self.attn(x, x, x, need_weights=False)[0]\n\n\n"
                 "def get_inputs():\n    return [torch.randn(2, 40, 64)]\n\n\n"
                 "def get_init_inputs():\n    return [64, 8]\n")
    p = problem_from_source(attention, where="attention.py", name="attention")
    first, _, larger = shape_variants(p)
    assert first.overrides == {"40": 29, "64": 47, "8": 5} and first.fallbacks[0] == {"40": 24, "64": 24, "8": 8}
    assert larger.fallbacks[0] == {"40": 72, "64": 72, "8": 8}
    generic = attention.replace("class Model(", "class ModelNew(").split("\n\n\ndef get_inputs")[0] + "\n"
    v = Verifier(fast_config(variants=True, require_kernel=False), pool=pool).verify(p, generic, "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert any("40->24, 64->24 (literal sizes) (for 40->29, 64->47, 8->5 (literal sizes), where the reference fails)" in n
               for n in v.evidence.notes), v.evidence.notes


def test_the_names_hand_written_problems_give_their_sizes():
    src = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return x\n\n\nB, S, E = 4, 128, 256\nd_model = 512\nin_ch, out_ch = 32, 64\nG = 8\n"
           "n_heads = 8\nkernel_size = 3\n\n\ndef get_inputs():\n    return [torch.randn(B, S, E)]\n\n\n"
           "def get_init_inputs():\n    return []\n")
    assert set(size_constants(problem_from_source(src, where="t.py", name="t"))) == \
        {"B", "S", "E", "d_model", "in_ch", "out_ch"}  # B = 4, a batch, varies by one; G and n_heads divide sizes


# KernelBench's level 2 writes 512 groups beside 8192 features (its 62 and 75), and 8 beside 16 channels.
GEMM_GROUPNORM = """import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"Linear, GroupNorm, LeakyReLU, then x + x.\"\"\"
    def __init__(self, input_size, hidden_size, num_groups, eps=1e-5, negative_slope=0.01):
        super(Model, self).__init__()
        self.fc = nn.Linear(input_size, hidden_size)
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=hidden_size, eps=eps)
        self.leaky_relu = nn.LeakyReLU(negative_slope=negative_slope)

    def forward(self, x):
        x = self.leaky_relu(self.gn(self.fc(x)))
        return x + x


batch_size = 16
input_size = 256
hidden_size = 2048
num_groups = 512


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_groups]
"""

# The group norm fused by hand for the 512 groups of 4 channels it was shown.
GROUPNORM_BAKED = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, num_groups, eps=1e-5, negative_slope=0.01):
        super().__init__()
        self.fc = nn.Linear(input_size, hidden_size)
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=hidden_size, eps=eps)
        self.eps, self.slope = eps, negative_slope

    def forward(self, x):
        x = self.fc(x)
        g = x.view(-1, 512, 4)  # 512 groups x 4 channels
        mean = g.mean(dim=2, keepdim=True)
        var = g.var(dim=2, unbiased=False, keepdim=True)
        x = ((g - mean) * torch.rsqrt(var + self.eps)).view(-1, 2048) * self.gn.weight + self.gn.bias
        x = torch.where(x > 0, x, x * self.slope)
        return x * 2
"""


def test_sizes_that_many_groups_must_divide_fall_back_to_multiples_of_the_group_count():
    """The step takes in any group count (512 groups: 1536, where it was capped at 256 and sizes fell back to
    multiples of 24 alone), and a second fallback makes the sizes under the step that the groups divide in the
    problem multiples of them: 2048 features in 512 groups become 1024, 16 channels in 8 groups 8, not 11."""
    p = problem_from_source(GEMM_GROUPNORM, where="gn.py", name="gn")
    first, _, larger = shape_variants(p)
    assert first.overrides == {"batch_size": 11, "input_size": 191, "hidden_size": 1535}
    assert first.fallbacks[0] == {"batch_size": 11, "input_size": 191, "hidden_size": 1024}  # under the step
    assert larger.fallbacks[0] == {"batch_size": 17, "input_size": 273, "hidden_size": 4608}  # 3 * 1536, 9 a group
    conv = problem_from_source(GEMM_GROUPNORM.replace("input_size = 256\nhidden_size = 2048\nnum_groups = 512",
                                                      "input_size = 64\nhidden_size = 16\nnum_groups = 8"),
                               where="c.py", name="c")
    # 16 channels beside a batch of 16: 9 (11 is the batch's: equal sizes move apart), then 8
    assert [f["hidden_size"] for f in shape_variants(conv)[0].fallbacks][:2] == [9, 8]
    assert [f["hidden_size"] for f in shape_variants(conv)[2].fallbacks][:2] == [19, 24]  # 17 the batch's: apart
    unnamed = problem_from_source(GEMM_GROUPNORM.replace("num_groups = 512\n", "").replace(
        "input_size, hidden_size, num_groups]", "input_size, 16, 4]").replace("hidden_size = 2048", "hidden_size = 16"),
        where="u.py", name="u")  # the group count a literal: 8, which 2, 4 and 8 divide
    # the literal 16 varies with the batch it equals, and is rounded with the constants: 8
    assert shape_variants(unnamed)[0].fallbacks[2]["16"] == 8


def test_a_group_norm_baked_to_the_groups_it_was_shown_fails_at_the_fallback_sizes(pool):
    p = problem_from_source(GEMM_GROUPNORM, where="gn.py", name="gn")
    verifier = Verifier(fast_config(variants=True, require_kernel=False), pool=pool)
    v = verifier.verify(p, GROUPNORM_BAKED, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is State.RUNTIME_ERROR, v.summary()
    assert "on shape variant batch_size=11, input_size=191, hidden_size=1024" in v.message, v.message
    generic = GROUPNORM_BAKED.replace("g = x.view(-1, 512, 4)  # 512 groups x 4 channels",
                                      "g = x.view(x.shape[0], self.gn.num_groups, -1)")
    fine = verifier.verify(p, generic.replace(".view(-1, 2048)", ".view_as(x)"), "cpu")
    assert fine.state is State.CORRECT, fine.summary()
    assert not any("skipped" in n for n in fine.evidence.notes), fine.evidence.notes


# A kernel for the shape it was shown, PyTorch at every other: right everywhere, and its kernel runs at one shape.
FAST_PATH_ONLY = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>

// Specialised for the benchmark's 16 x 256 rows: fully unrolled row length.
torch::Tensor softmax_16x256(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int r = 0; r < 16; ++r) {
        float m = -INFINITY, s = 0.f;
        for (int c = 0; c < 256; ++c) m = std::max(m, in[r * 256 + c]);
        for (int c = 0; c < 256; ++c) s += std::exp(in[r * 256 + c] - m);
        for (int c = 0; c < 256; ++c) o[r * 256 + c] = std::exp(in[r * 256 + c] - m) / s;
    }
    return out;
}
"""

ext = load_inline(name="softmax_fast_path_ext", cpp_sources=cpp_source, functions=["softmax_16x256"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.shape == (16, 256) and x.is_contiguous() and x.dtype == torch.float32:
            return ext.softmax_16x256(x)
        return torch.softmax(x, dim=1)  # general shapes
'''


def test_a_kernel_for_the_shown_shape_alone_with_a_pytorch_fallback_is_kernel_unused_at_a_variant(pool):
    """Right at every shape, but its kernel serves one: under the kforge rules its kernels must run at the variants
    too; KernelBench's rules, which ask neither, call it correct, and so does a run that asks for no kernel."""
    p = problem_from_source(SOFTMAX, where="softmax.py", name="softmax")
    v = Verifier(fast_config(variants=True), pool=pool).verify(p, FAST_PATH_ONLY, "cpu")
    assert v.state is State.KERNEL_UNUSED and v.rule == "kernel_not_run", v.summary()
    assert v.message.startswith("on shape variant ") and "its kernels serve the shape it was shown alone" in v.message
    assert v.states["kernelbench"] == "correct", v.summary()
    lenient = Verifier(fast_config(variants=True, require_kernel=False), pool=pool).verify(p, FAST_PATH_ONLY, "cpu")
    assert lenient.state is State.CORRECT, lenient.summary()


def test_the_names_and_shapes_models_write_are_sizes_and_settings_are_not():
    head = "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
    tail = "\n\ndef get_inputs():\n    return [torch.randn(8, 8)]\n\n\ndef get_init_inputs():\n    return []\n"
    src = head + ("timesteps = 512\nbsz = 32\nnfeat = 1024\nnum_bits = 8\nlayer_norm_eps = 16\nn_iters = 10\n"
                  "input_shape = [128, 4096]\npadded_len = 96\n") + tail
    sizes = size_constants(problem_from_source(src, where="t.py", name="t"))
    assert set(sizes) == {"timesteps", "bsz", "nfeat", "input_shape", "padded_len"}
    first, half, larger = shape_variants(problem_from_source(src, where="t.py", name="t"))
    assert first.overrides["input_shape"] == [95, 3071] and "input_shape = [95, 3071]" in first.source


def test_sizes_models_write_beside_the_usual_constants_are_varied_too():
    """Each of these passed every variant with the size baked in: a head's width (``d_head``: "head" was taken for
    a head count), an annotated constant, a batch of 4, two equal sizes (``height = width``: they moved together), a
    literal equal to a constant (``torch.randn(K, 256)`` beside ``M = 256``), and shapes listed together."""
    head = "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
    tail = "\n\ndef get_inputs():\n    return [torch.randn(K, 256)]\n\n\ndef get_init_inputs():\n    return []\n"
    src = head + ("batch_size: int = 4\nn_heads = 8\nd_head = 64\nheight = width = 128\nM = 256\nK = 96\n"
                  "input_shapes = [(512, 2048), (2048,)]\n") + tail
    p = problem_from_source(src, where="t.py", name="t")
    assert set(size_constants(p)) == {"batch_size", "d_head", "height", "width", "M", "K", "input_shapes"}
    first, half, larger = shape_variants(p)
    assert first.overrides == {"batch_size": 3, "d_head": 47, "height": 95, "width": 93, "M": 191, "K": 71,
                               "input_shapes": [(383, 1535), (1535,)], "256": 191}
    assert "batch_size: int = 3" in first.source and "torch.randn(K, 191)" in first.source
    assert half.overrides == {"batch_size": 3} and larger.overrides["batch_size"] == 5
    # apart in the larger variant too (a model that needs them equal gets its fallbacks, equal sizes among them)
    assert (larger.overrides["height"], larger.overrides["width"]) == (137, 139)


def test_a_size_a_model_asks_to_be_a_power_of_two_falls_back_to_half_of_it():
    src = LITERAL.replace("return [torch.randn(16, 1024)]", "return [torch.randn(batch_size, dim)]").replace(
        "return [1024, 512]", "return [dim, 512]") + "\nbatch_size = 64\ndim = 1024\n"
    first = shape_variants(problem_from_source(src, where="h.py", name="h"))[0]
    assert first.overrides == {"batch_size": 47, "dim": 767, "512": 383}
    assert {"batch_size": 32, "dim": 512, "512": 256} in first.fallbacks


def test_values_are_not_literal_sizes_and_sizes_outside_get_inputs_are():
    """randint's bounds and a tensor's scale are values (a bound equal to a size follows it: it indexes that
    size); a helper only ``get_inputs`` calls and a shape that mixes a constant with a number write sizes."""
    src = LITERAL.replace("return [torch.randn(16, 1024)]",
                          "idx = torch.randint(0, 1024, (16, 8))\n    q = torch.randint(0, 256, (16, 64), "
                          "dtype=torch.uint8)\n    return [torch.randn(16, 1024) * 8, idx, q, _more()]")
    src += "\n\ndef _more():\n    return torch.full((16, 48), 10)\n"
    found = [n.value for n in literal_sizes(src)]
    assert sorted(found) == sorted([16, 8, 16, 64, 16, 1024, 16, 48, 1024, 512, 1024])  # not 256, the 8 or 10
    p = problem_from_source(src, where="v.py", name="v")
    first = shape_variants(p)[0]
    assert "torch.randint(0, 767, (11, 5))" in first.source and "torch.randint(0, 256, (11, 47)" in first.source
    assert "torch.randn(11, 767) * 8" in first.source and "torch.full((11, 35), 10)" in first.source
    mixed = LITERAL.replace("return [torch.randn(16, 1024)]", "return [torch.randn(*input_shape)]") + \
        "\nbatch_size = 64\ninput_shape = (batch_size, 1024)\n"
    first = shape_variants(problem_from_source(mixed, where="m.py", name="m"))[0]
    assert first.overrides == {"batch_size": 47, "1024": 767, "512": 383}
    assert "input_shape = (batch_size, 767)" in first.source


def test_a_square_written_as_literals_is_varied_in_its_first_side_alone():
    """``torch.randn(1024, 1024)``: keyed by value, both sides moved together, and a kernel that takes its input
    for square passed; the first side alone is halved too."""
    src = LITERAL.replace("torch.randn(16, 1024)", "torch.randn(1024, 1024)").replace("return [1024, 512]",
                                                                                     "return [1024, 1024]")
    first, alone, larger = shape_variants(problem_from_source(src, where="sq.py", name="sq"))
    assert first.overrides == {"1024": 767} and alone.overrides == {"1024@0": 511}
    assert "torch.randn(511, 1024)" in alone.source and "return [1024, 1024]" in alone.source
    assert describe(alone.overrides) == "1024->511 (its first) (literal sizes)"


def test_a_literal_the_model_fixes_leaves_the_others_varied(pool):
    """``nn.Linear(1024, 512)`` in the model: the variants that change 1024 fail in the reference, and each falls
    back to the batch's change alone rather than being skipped, so the larger batch is still checked."""
    fixed = LITERAL.replace("def __init__(self, in_features, out_features):", "def __init__(self):").replace(
        "nn.Linear(in_features, out_features)", "nn.Linear(1024, 512)").replace("return [1024, 512]", "return []")
    p = problem_from_source(fixed, where="fixed.py", name="fixed")
    assert describe(shape_variants(p)[2].fallbacks[-1]) == "16->17 (literal sizes)"
    baked = fixed.replace("class Model(", "class ModelNew(").split("\n\n\ndef get_inputs")[0].replace(
        "return torch.softmax(self.fc(x), dim=-1)", "return torch.softmax(self.fc(x[:16]), dim=-1)") + "\n"
    v = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool).verify(p, baked, "cpu")
    assert v.states["kernelbench"] == "correct" and v.state is State.SHAPE_MISMATCH, v.summary()
    assert "on shape variant 16->17 (literal sizes)" in v.message or "16->17 (literal sizes) (for" in v.message, v.message


def test_a_correct_verdict_says_when_no_other_shape_was_checked(pool):
    """Sizes under the minimum alone (a batch of 4 rows of 6): nothing to vary, and the note says so, so that
    `correct` is not read as checked at other shapes."""
    tiny = LITERAL.replace("torch.randn(16, 1024)", "torch.randn(4, 6)").replace("return [1024, 512]", "return [6, 5]")
    p = problem_from_source(tiny, where="tiny.py", name="tiny")
    assert shape_variants(p) == []
    generic = tiny.replace("class Model(", "class ModelNew(").split("\n\n\ndef get_inputs")[0] + "\n"
    v = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool).verify(p, generic, "cpu")
    assert v.state is State.CORRECT and any(n.startswith("no shape variants:") for n in v.evidence.notes), v.summary()
    declared = problem_from_source(LITERAL + "\nKFORGE = {\"variants\": []}\n", where="none.py", name="none")
    generic = LITERAL.replace("class Model(", "class ModelNew(").split("\n\n\ndef get_inputs")[0] + "\n"
    v = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool).verify(
        declared, generic, "cpu")
    assert v.state is State.CORRECT and any("declares none" in n for n in v.evidence.notes), v.summary()
