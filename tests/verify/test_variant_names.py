"""Sizes under other names than the usual ones (`kforge.verify.variant_sizes`): a head count that only the inputs
read, a list of widths written as a repeated list, an Inception module's branch widths; and sizes the fallbacks'
rounding would make equal again (`kforge.verify.variants._stepped_apart`). Each let a kernel with the size baked in
pass every variant (a probe's held-out candidates)."""

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from kforge.verify.variants import shape_variants, size_constants
from tests.helpers import fast_config

# KernelBench level 1's scaled-dot-product attention, at a CPU size: the head count is a dimension of the inputs.
SDPA = '''import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
num_heads = 8
sequence_length = 64
embedding_dimension = 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, Q, K, V):
        return F.scaled_dot_product_attention(Q, K, V)


def get_inputs():
    Q = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension)
    K = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension)
    V = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension)
    return [Q, K, V]


def get_init_inputs():
    return []
'''

# Written as models write it: the head count it was shown folded into the batch.
SDPA_BAKED_HEADS = '''import torch
import torch.nn as nn

NUM_HEADS = 8


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, Q, K, V):
        B, _, S, D = Q.shape
        q, k, v = (t.reshape(B * NUM_HEADS, S, D) for t in (Q, K, V))
        w = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / D ** 0.5, dim=-1)
        return torch.bmm(w, v).view(B, NUM_HEADS, S, D)
'''


def _sizes(source: str) -> set[str]:
    return set(size_constants(problem_from_source(source, where="p.py", name="p")))


def test_a_head_count_only_the_inputs_read_is_a_size_and_one_the_model_reads_is_not():
    assert _sizes(SDPA) == {"batch_size", "num_heads", "sequence_length", "embedding_dimension"}
    mha = SDPA.replace("return []", "return [embedding_dimension, num_heads]").replace(
        "def __init__(self):", "def __init__(self, embed, heads):")
    assert "num_heads" not in _sizes(mha)  # a width it must divide: a divisor, as before


def test_a_head_count_baked_in_fails_the_kforge_rules_only(pool):
    problem = problem_from_source(SDPA, where="sdpa.py", name="sdpa")
    v = Verifier(fast_config(require_kernel=False, skip_timing=True, variants=True), pool=pool).verify(
        problem, SDPA_BAKED_HEADS, "cpu")
    assert v.state is not State.CORRECT and "num_heads=" in v.message, v.summary()
    assert v.states["kernelbench"] == "correct", v.states


def test_widths_written_as_a_repeated_list_and_by_a_modules_own_names_are_sizes():
    mlp = ("import torch\nimport torch.nn as nn\n\nbatch_size = 64\ninput_size = 128\nhidden_layer_sizes = [64] * 4\n"
           "output_size = 32\nblock_widths = [16, 32, 64]\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return x\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, input_size)]\n\n\n"
           "def get_init_inputs():\n    return [input_size, hidden_layer_sizes, output_size, block_widths]\n")
    assert {"hidden_layer_sizes", "block_widths"} <= _sizes(mlp)
    first = shape_variants(problem_from_source(mlp, where="mlp.py", name="mlp"))[0]
    assert first.overrides["hidden_layer_sizes"] == [47] * 4 and "hidden_layer_sizes = [47, 47, 47, 47]" in first.source
    inception = ("import torch\nimport torch.nn as nn\n\nin_channels = 32\nout_1x1 = 16\nreduce_3x3 = 24\n"
                 "out_3x3 = 32\npool_proj = 16\ngrowth_rate = 32\npool_size = 3\nkernel_size = 3\n\n\n"
                 "class Model(nn.Module):\n    def forward(self, x):\n        return x\n\n\ndef get_inputs():\n"
                 "    return [torch.randn(2, in_channels, 16, 16)]\n\n\ndef get_init_inputs():\n"
                 "    return [in_channels, out_1x1, reduce_3x3, out_3x3, pool_proj, growth_rate, pool_size, kernel_size]\n")
    assert _sizes(inception) == {"in_channels", "out_1x1", "reduce_3x3", "out_3x3", "pool_proj", "growth_rate"}


def test_sizes_a_fallback_rounds_equal_are_first_tried_two_steps_apart():
    """KernelBench's ``in_features = out_features = 8192`` came back equal at every fallback, and a GEMM that took
    one for the other passed them all; the equal sizes stay, later, for a model that needs them so."""
    gemm = ("import torch\nimport torch.nn as nn\n\nbatch_size = 32\nin_features = 256\nout_features = 256\n\n\n"
            "class Model(nn.Module):\n    def __init__(self, i, o):\n        super().__init__()\n"
            "        self.fc = nn.Linear(i, o)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\n"
            "def get_inputs():\n    return [torch.randn(batch_size, in_features)]\n\n\n"
            "def get_init_inputs():\n    return [in_features, out_features]\n")
    first, _, larger = shape_variants(problem_from_source(gemm, where="gemm.py", name="gemm"))
    assert first.overrides["in_features"] != first.overrides["out_features"]
    assert larger.overrides["in_features"] != larger.overrides["out_features"]
    a, b = first.fallbacks[0], first.fallbacks[1]
    assert a["in_features"] != a["out_features"] and b["in_features"] == b["out_features"], first.fallbacks


def test_a_free_head_count_goes_back_to_its_own_value_where_the_heads_must_make_the_embedding():
    """Heads drawn apart, projected joined by a Linear of the embedding's width: the heads' count times their width
    must be the embedding. With the count varied, no fallback put it back beside the proportional sizes, and the
    smaller variant was skipped where it had run."""
    mha = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Model(nn.Module):\n"
           "    def __init__(self, embed_dim):\n        super().__init__()\n"
           "        self.proj = nn.Linear(embed_dim, embed_dim)\n\n    def forward(self, q, k, v):\n"
           "        B, H, S, D = q.shape\n        o = F.scaled_dot_product_attention(q, k, v)\n"
           "        return self.proj(o.transpose(1, 2).reshape(B, S, H * D))\n\n\nbatch_size = 2\nnum_heads = 8\n"
           "seq_len = 32\nhead_dim = 8\nembed_dim = 64\n\n\ndef get_inputs():\n"
           "    return [torch.randn(batch_size, num_heads, seq_len, head_dim) for _ in range(3)]\n\n\n"
           "def get_init_inputs():\n    return [embed_dim]\n")
    first = shape_variants(problem_from_source(mha, where="mha.py", name="mha"))[0]
    assert first.overrides["num_heads"] != 8
    assert any(f["num_heads"] * f["head_dim"] == f["embed_dim"] for f in first.fallbacks), first.fallbacks


def test_no_fallback_is_the_problems_own_shape_and_a_count_is_not_the_one_halved():
    """A count's fallback at its own value ("correct on shape variant num_groups=8 (for num_groups=3 ...)") named
    the problem's shape as a variant; and a count first in the file was halved alone where sizes follow it."""
    pairs = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x, w):\n"
             "        y = torch.bmm(x, w)\n        return y.view(-1, 2, y.shape[1], y.shape[2]).sum(1)\n\n\n"
             "num_groups = 8\nM = 32\nK = 48\nN = 16\n\n\ndef get_inputs():\n"
             "    return [torch.randn(num_groups, M, K), torch.randn(num_groups, K, N)]\n\n\n"
             "def get_init_inputs():\n    return []\n")
    p = problem_from_source(pairs, where="pairs.py", name="pairs")
    own = {k: p.constants[k] for k in ("num_groups", "M", "K", "N")}
    for v in shape_variants(p):
        assert all(any(f[k] != own[k] for k in f) for f in v.fallbacks), v.fallbacks
    assert list(shape_variants(p)[1].overrides) == ["M"]  # the first size, not the count ahead of it
    counted = pairs.replace("num_groups = 8\n", "num_groups = 8\nbatch_size = 16\n")
    assert list(shape_variants(problem_from_source(counted, where="b.py", name="b"))[1].overrides) == ["batch_size"]
