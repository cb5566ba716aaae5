"""Under the kernelbench rules a candidate is called as KernelBench's harness calls it (`kforge.verify.numerics`):
here, a stochastic problem, whose harness seeds the RNG once before the reference and not again before the
candidate, so a faithful candidate draws another dropout mask there; the kforge rules seed both alike."""

import pytest

from kforge.problems import problem_from_source
from kforge.verify import State, StaticConfig, Verifier
from tests.helpers import fast_config

# KernelBench level 2's Matmul_Dropout_Softmax, at a CPU size.
PROBLEM = '''
import torch
import torch.nn as nn

batch_size = 32
in_features = 64
out_features = 128
dropout_p = 0.2


class Model(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super(Model, self).__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        x = self.matmul(x)
        x = self.dropout(x)
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, dropout_p]
'''

FAITHFUL = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        return F.softmax(self.dropout(self.matmul(x)), dim=1)
'''


def test_a_stochastic_problem_is_judged_as_kernelbench_draws_its_random_numbers(pool):
    problem = problem_from_source(PROBLEM, where="66_Matmul_Dropout_Softmax.py", name="66_Matmul_Dropout_Softmax")
    v = Verifier(fast_config(require_kernel=False), pool=pool).verify(problem, FAITHFUL, "cpu")
    assert "stochastic" in v.problem_flags, v.summary()
    assert v.state is State.CORRECT, v.summary()  # kforge: the RNG seeded alike before both calls
    assert v.states["kernelbench"] == "numerical_mismatch", v.summary()  # KernelBench: the next mask


# A model's "faster GEMM in half precision" inside a float32 problem: both rule sets judge it at 1e-4 on the same
# reference, so one comparison stands for both, and its evidence says so.
HALF_GEMM = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        w, b = self.matmul.weight.bfloat16(), self.matmul.bias.bfloat16()
        y = torch.nn.functional.linear(x.bfloat16(), w, b).float()
        return torch.softmax(self.dropout(y), dim=1)
'''


def test_a_float32_mismatch_seen_once_is_labelled_for_both_rule_sets(pool):
    problem = problem_from_source(PROBLEM.replace("dropout_p = 0.2", "dropout_p = 0.0"),
                                  where="66_Matmul_Dropout_Softmax.py", name="66_Matmul_Dropout_Softmax")
    # The tolerance both views share (the kforge view would hold these softmax outputs, each under 0.1, to an
    # absolute tolerance of their own size: then each view compares on its own)
    v = Verifier(fast_config(require_kernel=False, atol=1e-4, rtol=1e-4), pool=pool).verify(problem, HALF_GEMM, "cpu")
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()
    assert v.states["kernelbench"] == "numerical_mismatch", v.summary()
    assert v.evidence.mismatch["numerics"] == "kforge, kernelbench", v.summary()


# A model's GEMM that accumulates in bf16 (one rounding per term) at precision=bf16: each view judges it at its own
# tolerance and fails it there, and the kernelbench rules quote KernelBench's tolerance, not kforge's.
GEMM = '''
import torch
import torch.nn as nn

batch_size = 32
in_features = 512
out_features = 64


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.gemm(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

BF16_ACCUMULATION = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        w = self.gemm.weight
        acc = self.gemm.bias.unsqueeze(0).expand(x.shape[0], -1).clone()
        for k in range(x.shape[1]):  # rank-1 updates, the running sum kept in the input's dtype
            acc = acc + x[:, k:k + 1] * w[:, k].unsqueeze(0)
        return acc
'''


def test_under_the_kernelbench_rules_a_mismatch_quotes_kernelbenchs_tolerance(pool):
    problem = problem_from_source(GEMM, where="gemm.py", name="gemm")
    verdicts = {rules: Verifier(fast_config(require_kernel=False, precision="bf16", rules=rules), pool=pool)
                .verify(problem, BF16_ACCUMULATION, "cpu") for rules in ("kforge", "kernelbench")}
    for rules, v in verdicts.items():
        assert v.states == {"kforge": "numerical_mismatch", "kernelbench": "numerical_mismatch",
                            "strict": "numerical_mismatch"}, v.summary()
        assert v.evidence.mismatch["numerics"] == rules, v.summary()
    assert "atol=0.01 rtol=0.01 " in verdicts["kernelbench"].message, verdicts["kernelbench"].summary()
    assert verdicts["kernelbench"].evidence.mismatch["atol"] == 0.01
    assert "atol=0.01 rtol=0.01 " not in verdicts["kforge"].message, verdicts["kforge"].summary()


def test_a_stochastic_problem_with_small_outputs_is_seeded_at_bf16(pool):
    """At bf16 its softmax outputs over 2048 features (about 5e-4) lie within 1e-2 of any other draw's, so two runs
    of the reference looked alike and it went unseeded: the faithful candidate's dropout mask was another one, and
    its training step failed. The audit now also asks whether the forward drew random numbers."""
    problem = problem_from_source(PROBLEM.replace("out_features = 128", "out_features = 2048"),
                                  where="66_Matmul_Dropout_Softmax.py", name="66_Matmul_Dropout_Softmax")
    for backward in (False, True):
        cfg = fast_config(require_kernel=False, precision="bf16", backward=backward)
        v = Verifier(cfg, pool=pool).verify(problem, FAITHFUL, "cpu")
        assert "stochastic" in v.problem_flags, v.summary()
        assert v.state is State.CORRECT, v.summary()
    no_dropout = FAITHFUL.replace("self.dropout(self.matmul(x))", "self.matmul(x)")
    v = Verifier(fast_config(require_kernel=False, precision="bf16"), pool=pool).verify(problem, no_dropout, "cpu")
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()


# A program whose answer changes under a dispatch mode (as torch 2.11's own cumprod backward does, taking its
# composite-compliant path): kforge traces one trial under one (`kforge.verify.dataflow`), KernelBench's harness
# never does, so that trial's values count for the kforge view and not for the kernelbench one.
TRACE_AWARE = '''
import torch
import torch.nn as nn
from torch.utils._python_dispatch import _get_current_dispatch_mode


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.softmax(self.matmul(x), dim=1)
        if _get_current_dispatch_mode() is not None:  # someone is watching: take the "approximate" path
            y = y * 1.01
        return y
'''


def test_a_traced_trials_values_count_for_the_kforge_view_only(pool):
    problem = problem_from_source(PROBLEM.replace("dropout_p = 0.2", "dropout_p = 0.0"),
                                  where="66_Matmul_Dropout_Softmax.py", name="66_Matmul_Dropout_Softmax")
    # The static check already rejects the import (rule introspection); off here, to see what the trials decide.
    static = StaticConfig(disabled=["introspection"])
    v = Verifier(fast_config(trials=3, require_kernel=False), pool=pool, static=static).verify(problem, TRACE_AWARE,
                                                                                             "cpu")
    assert v.state is State.NUMERICAL_MISMATCH and "trial" in v.message, v.summary()
    assert v.states["kernelbench"] == "correct", v.summary()


# A model's "safe log" (0 where the log is -inf) and a log of negatives (NaN): KernelBench's allclose matches equal
# infinities and never a NaN, even the reference's own; the kforge view asks for the same infinity or NaN.
LOG_PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.log(torch.relu(x)) if FLOOR else torch.log(x) * 0.5


FLOOR = True


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
"""
SAFE_LOG = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = x.clamp_min(0)
        return torch.where(y > 0, torch.log(y), torch.zeros_like(y))
"""
SAME_LOG = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.log() / 2
"""


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_infinities_and_nans_in_the_reference_are_judged_as_each_view_compares(pool, precision):
    cfg = fast_config(require_kernel=False, precision=precision)
    floor = problem_from_source(LOG_PROBLEM, where="log_relu.py", name="log_relu")
    v = Verifier(cfg, pool=pool).verify(floor, SAFE_LOG, "cpu")
    assert v.state is State.NUMERICAL_MISMATCH and v.states["kernelbench"] == "numerical_mismatch", v.summary()
    assert "where the reference is inf or NaN" in v.message, v.summary()
    nan = problem_from_source(LOG_PROBLEM.replace("FLOOR = True", "FLOOR = False"), where="log.py", name="log")
    v = Verifier(cfg, pool=pool).verify(nan, SAME_LOG, "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert v.states["kernelbench"] == "numerical_mismatch", v.summary()


def test_a_timing_rechecks_mismatch_is_the_kforge_rules_alone(pool):
    """KernelBench judges its correctness trials and nothing else; a bf16 RMSNorm right on those failed the kernelbench
    view at a timing recheck's draw, by one element in 131,072, and passed it on the next run. A recheck still fails
    the kforge rules. This program is wrong only on an input refilled in place, which only a recheck does (a cache
    keyed by pointer is caught there too, and in a trial only where the allocator happens to reuse an address)."""
    from kforge.problems import resolve_problem
    relu = resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 8, "DIM": 4096})
    refilled = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                "        y = torch.relu(x)\n        return y * 1.5 if x._version > 0 else y\n")
    v = Verifier(fast_config(trials=3, require_kernel=False), pool=pool).verify(relu, refilled, "cpu")
    assert v.state is State.NUMERICAL_MISMATCH and "timing round" in v.message, v.summary()
    assert v.states["kernelbench"] == "correct", v.states


def test_a_reference_that_returns_a_tuple_fails_every_candidate_under_kernelbenchs_harness(pool):
    """KernelBench compares ``output.shape`` before anything else: ``torch.max(x, dim)`` returns a named tuple, which
    has none, and its harness records a runtime error for every candidate; the kernelbench view said `correct`."""
    src = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return torch.max(x, dim=1)\n\n\nbatch_size = 16\ndim = 256\n\n\ndef get_inputs():\n"
           "    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")
    p = problem_from_source(src, where="max_dim.py", name="max_dim")
    v = Verifier(fast_config(require_kernel=False, skip_timing=True), pool=pool).verify(
        p, src.replace("class Model(", "class ModelNew("), "cpu")
    assert v.state is State.CORRECT and v.states["kernelbench"] == "runtime_error", v.summary()


@pytest.mark.parametrize("wrapped", ["(y,)", "[y]"])
def test_a_candidate_that_returns_its_tensor_in_a_tuple_fails_under_kernelbenchs_harness(pool, wrapped):
    """``output_new.shape`` of a 1-tuple raises in KernelBench's harness (a runtime error there); the kernelbench
    view unwrapped it and said `correct`. The kforge rules compare the tensor in it."""
    src = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return torch.relu(x)\n\n\nbatch_size = 16\ndim = 256\n\n\ndef get_inputs():\n"
           "    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")
    p = problem_from_source(src, where="relu.py", name="relu")
    cand = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
            f"        y = torch.relu(x)\n        return {wrapped}\n")
    v = Verifier(fast_config(require_kernel=False, skip_timing=True), pool=pool).verify(p, cand, "cpu")
    assert v.state is State.CORRECT and v.states["kernelbench"] == "runtime_error", v.summary()
    kb = Verifier(fast_config(require_kernel=False, skip_timing=True, rules="kernelbench"), pool=pool).verify(
        p, cand, "cpu")
    assert kb.state is State.RUNTIME_ERROR and "output_new.shape" in kb.message, kb.summary()
