"""How a shape variant's constants reach the candidate (`kforge.verify.variant_constants.shown_and_followed`): the test
configuration it was shown stays as shown, so a size read from ``batch_size`` instead of the input is baked in;
what the problem's own model reads follows the variant (the stateful side is tests/verify/test_stateful.py)."""

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from kforge.verify.variant_constants import model_reads, shown_and_followed
from tests.helpers import fast_config

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


batch_size = 16
dim = 4096
input_shape = (batch_size, dim)


def get_inputs():
    return [torch.randn(*input_shape)]


def get_init_inputs():
    return [0.5]
'''

# A KernelBench-style generation: the whole file again, and the output sized by the constants it restates.
RESTATED = '''import torch
import torch.nn as nn

batch_size = 16
dim = 4096


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        out = torch.empty(batch_size, dim, device=x.device, dtype=x.dtype)
        out.copy_(x.clamp_min(0))
        return out.mul_(self.scale)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.5]
'''

# The same without restating them: the problem's namespace supplies them (KernelBench's harness runs both files in
# one globals dict), so the rows come from there.
INHERITED = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        rows = x.reshape(batch_size, -1)  # noqa: F821 - the problem's
        return (rows.clamp_min(0) * self.scale).view_as(x)
'''


def test_what_the_model_reads_follows_the_variant_and_the_test_configuration_stays_as_shown():
    assert model_reads(PROBLEM) & {"batch_size", "dim", "input_shape"} == set()
    stateful = PROBLEM.replace("self.scale = scale", "self.scale = scale\n        self.h = torch.zeros(batch_size, 1)")
    assert "batch_size" in model_reads(stateful) and "dim" not in model_reads(stateful)
    # through a module-level assignment the model reads
    derived = PROBLEM.replace("return torch.relu(x) * self.scale", "return torch.relu(x).view(input_shape) * self.scale")
    assert {"batch_size", "dim", "input_shape"} <= model_reads(derived)
    # a parameter named like a constant is the parameter (every KernelBench level-2 model writes
    # ``def __init__(self, in_features, out_features)``), in a nested function or lambda too, unless declared global
    shadowed = PROBLEM.replace("def __init__(self, scale):", "def __init__(self, scale, dim=None):").replace(
        "self.scale = scale", "self.scale = scale\n        self.k = (lambda batch_size: batch_size)(dim)")
    assert model_reads(shadowed) & {"batch_size", "dim", "input_shape"} == set()
    declared = shadowed.replace("self.scale = scale", "global dim\n        self.scale = scale")
    assert "dim" in model_reads(declared) and "batch_size" not in model_reads(declared)
    constants = {"batch_size": 16, "dim": 4096}
    assert shown_and_followed({"batch_size": 11, "dim": 3071}, constants, set()) == (constants, {})
    assert shown_and_followed({"batch_size": 11, "dim": 3071}, constants, {"batch_size"}) == \
        ({"dim": 4096}, {"batch_size": 11})
    # a constant computed from one the variant changes (``ffn = 4 * dim``), which only get_init_inputs reads, is
    # shown as the problem has it: a kernel that bakes in ``ffn`` was rebuilt at each variant's value
    constants = {**constants, "ffn": 16384}
    assert shown_and_followed({"dim": 3071}, constants, set(), {"ffn"}) == ({"dim": 4096, "ffn": 16384}, {})
    assert shown_and_followed({"dim": 3071}, constants, {"ffn"}, {"ffn"}) == ({"dim": 4096}, {})


def test_sizes_read_from_the_constants_it_was_shown_are_baked_in(pool):
    """Restated or read from the problem's namespace, ``batch_size`` is the batch the candidate was shown: correct
    under KernelBench's rules, which judge one shape, and not under kforge's, at the first variant."""
    p = problem_from_source(PROBLEM, where="scaled_relu.py", name="scaled_relu")
    verifier = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool)
    for candidate in (RESTATED, INHERITED):
        v = verifier.verify(p, candidate, "cpu")
        assert v.states["kernelbench"] == "correct", v.summary()
        assert v.state is not State.CORRECT and "on shape variant batch_size=11, dim=3071" in v.message, v.summary()
    generic = RESTATED.replace("torch.empty(batch_size, dim,", "torch.empty(x.shape[0], x.shape[1],")
    fine = verifier.verify(p, generic, "cpu")
    assert fine.state is State.CORRECT, fine.summary()


LINEAR = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 16
in_features = 96
out_features = 160


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

# The model's forward reads the features from the constants it restated, not from its input or weight.
LINEAR_RESTATED = '''import torch
import torch.nn as nn

batch_size = 16
in_features = 96
out_features = 160


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.view(-1, in_features)
        out = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return out.clamp_min(0).view(-1, out_features)
'''


def test_constants_only_the_init_inputs_read_are_the_test_configuration_it_was_shown(pool):
    """``in_features`` reaches the problem's model as ``__init__``'s parameter of the same name: a candidate whose
    forward reads the module's ``in_features`` instead has baked in the size it was shown."""
    p = problem_from_source(LINEAR, where="linear_relu.py", name="linear_relu")
    verifier = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool)
    v = verifier.verify(p, LINEAR_RESTATED, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is not State.CORRECT and "on shape variant" in v.message and "in_features=" in v.message, \
        v.summary()
    generic = LINEAR_RESTATED.replace("x.view(-1, in_features)", "x.reshape(-1, x.shape[-1])").replace(
        ".view(-1, out_features)", "")
    fine = verifier.verify(p, generic, "cpu")
    assert fine.state is State.CORRECT, fine.summary()


def test_a_constant_computed_from_a_size_is_shown_as_the_problem_has_it(pool):
    """``wide = 2 * in_features`` is not named like a size, so no variant sets it, but each variant's file computes
    it anew: a candidate that read the module's ``wide`` got each variant's value, and passed with the width baked
    in."""
    derived = LINEAR.replace("out_features = 160", "wide = 2 * in_features").replace(
        "return [in_features, out_features]", "return [in_features, wide]")
    p = problem_from_source(derived, where="linear_wide.py", name="linear_wide")
    candidate = LINEAR_RESTATED.replace("out_features = 160\n", "").replace(
        ".view(-1, out_features)", ".view(-1, wide)  # noqa: F821 - the problem's")
    verifier = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool)
    v = verifier.verify(p, candidate.replace("x.view(-1, in_features)", "x.reshape(-1, x.shape[-1])"), "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is not State.CORRECT and "on shape variant" in v.message, v.summary()


def test_a_helper_only_get_inputs_calls_is_test_configuration():
    """``_make_input()`` draws ``torch.randn(batch_size, dim)`` for ``get_inputs``: its reads are the test
    configuration, not the model's, so a candidate that sizes its output by ``batch_size`` has baked it in."""
    helper = PROBLEM.replace("def get_inputs():\n    return [torch.randn(*input_shape)]",
                             "def _make_input():\n    return torch.randn(batch_size, dim)\n\n\n"
                             "def get_inputs():\n    return [_make_input()]")
    assert model_reads(helper) & {"batch_size", "dim", "_make_input"} == set()
    # the same helper called by the model is the model's
    called = helper.replace("return torch.relu(x) * self.scale", "return torch.relu(x + 0 * _make_input()) * self.scale")
    assert {"batch_size", "dim"} <= model_reads(called)


# The scale derives from a size the model reads; a generation restates the whole header, the derived constant too.
DERIVED = '''import torch
import torch.nn as nn

batch_size = 16
dim = 1024
scale = dim ** -0.5


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x * scale, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim) * 8]


def get_init_inputs():
    return []
'''

DERIVED_RESTATED = '''import torch
import torch.nn as nn

batch_size = 16
dim = 1024
scale = dim ** -0.5


class ModelNew(nn.Module):
    def forward(self, x):
        y = x * scale
        y = y - y.amax(dim=1, keepdim=True)
        e = y.exp()
        return e / e.sum(dim=1, keepdim=True)
'''


def test_a_restated_constant_derived_from_a_followed_size_takes_the_variant_value(pool):
    """``scale = dim ** -0.5`` restated with the header: the variant's ``dim`` counts, so its ``scale`` must too,
    or a candidate that computes exactly as the model does fails at every variant that changes ``dim``."""
    p = problem_from_source(DERIVED, where="scaled_softmax.py", name="scaled_softmax")
    v = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool).verify(
        p, DERIVED_RESTATED, "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert any("correct on shape variant(s) batch_size=11, dim=767" in n for n in v.evidence.notes), v.evidence.notes
