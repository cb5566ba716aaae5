"""The problem audit (stochastic, degenerate, launch-bound, FLOPs, bytes) and what verification does with it."""

import pytest

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from kforge.verify.verifier import ProblemFails
from tests.helpers import fast_config

TAIL = "\ndef get_inputs():\n    return [torch.randn(N, D)]\n\ndef get_init_inputs():\n    return []\n"


def problem(name, forward, n=64, d=256, extra=""):
    src = (f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nN = {n}\nD = {d}\n{extra}"
           f"class Model(nn.Module):\n    def forward(self, x):\n        return {forward}\n" + TAIL)
    return problem_from_source(src, where=name, name=name)


def own(p):
    """The reference as its own candidate (no kernel: judged with the kernel requirement off)."""
    return p.source + "\nclass ModelNew(Model):\n    pass\n"


@pytest.fixture(scope="module")
def verifier(pool):
    return Verifier(fast_config(require_kernel=False), pool=pool)


def test_flags(verifier):
    plain = verifier.audit(problem("plain", "torch.relu(x) @ x.t()"), "cpu")
    # launch_bound follows the measured time, which depends on the machine (an idle core runs these 2 MFLOP
    # in under 20 us, a busy one may not): the rule is checked, not the speed
    assert set(plain.flags) - {"launch_bound"} == set() and plain.flops == 2 * 64 * 256 * 64
    assert ("launch_bound" in plain.flags) == (plain.ref_ms < 0.02)
    assert plain.bytes == 4 * (64 * 256 + 64 * 64) and plain.out_bytes == 4 * 64 * 64
    dropout = verifier.audit(problem("dropout", "F.dropout(x, p=0.5, training=True)"), "cpu")
    assert "stochastic" in dropout.flags and "degenerate" not in dropout.flags
    zeros = verifier.audit(problem("zeros", "torch.clamp(x.abs().min(dim=1).values * 0.0 - 1.0, min=0.0)"), "cpu")
    assert "degenerate" in zeros.flags
    # The mean of 16k standard normals is ~1e-2 with spread ~1e-2: above the tolerance, so not degenerate...
    assert "degenerate" not in verifier.audit(problem("mean", "x.mean(dim=1)"), "cpu").flags
    # ...but the mean of 4M of them is within 1e-4 of zero on every draw: returning zeros would pass.
    assert "degenerate" in verifier.audit(problem("tiny_mean", "x.mean().reshape(1) * 1e-3", n=4096, d=1024),
                                          "cpu").flags
    tiny = verifier.audit(problem("tiny", "x + 1", n=2, d=2), "cpu")
    assert ("launch_bound" in tiny.flags) == (tiny.ref_ms < 0.02) and tiny.ref_ms < 1.0


MATMUL_SUBTRACT_RELU = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        x = self.linear(x)
        x = x - self.subtract_value
        x = x * self.multiply_value
        return torch.relu(x)


batch_size = 128
in_features = 10
out_features = 5
subtract_value = 2.0
multiply_value = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, subtract_value, multiply_value]
"""


def test_a_problem_whose_output_is_all_zeros_on_some_draws_is_degenerate(pool):
    """The shift sends nearly every value below zero before the ReLU: most draws' outputs are all zeros, a few have
    a value or two above. On the zero draws a "kernel" returning zeros passes (a constant is refused only where
    the reference varies), so the problem is degenerate, at the size the verification runs it. The audit asked for
    every draw to be constant and missed it on 7 seeds of 10; this seed is one of them."""
    p = problem_from_source(MATMUL_SUBTRACT_RELU, where="9_matmul_subtract_relu", name="9_matmul_subtract_relu")
    v = Verifier(fast_config(require_kernel=False, seed=1), pool=pool)
    audit = v.audit(p, "cpu")
    zero, draws = audit.constant_draws
    assert 0 < zero < draws, audit  # the premise: draws of both kinds
    assert "degenerate" in audit.flags, audit
    verdict = v.verify(p, own(p), "cpu")
    assert verdict.state is State.CORRECT and "degenerate" in verdict.problem_flags, verdict.summary()


def test_stochastic_reference_passes_against_itself(verifier):
    p = problem("dropout_own", "F.dropout(x, p=0.5, training=True)")
    v = verifier.verify(p, own(p), "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert v.problem_flags == ["stochastic"] and any("stochastic" in n for n in v.evidence.notes)


def test_degenerate_problem_is_flagged_in_the_verdict(verifier):
    p = problem("zeros_own", "torch.zeros_like(x) * x")
    v = verifier.verify(p, own(p), "cpu")
    assert v.state is State.CORRECT and "degenerate" in v.problem_flags, v.summary()
    assert "degenerate" in v.to_dict()["problem_flags"]


def test_a_reference_that_fails_on_its_own_is_not_the_candidates_fault(verifier):
    p = problem("broken", "x @ x  # (64, 256) @ (64, 256) does not multiply")
    with pytest.raises(ProblemFails, match="bug in the problem") as err:
        verifier.verify(p, own(p), "cpu")
    assert "does not multiply" in err.value.traceback  # the problem's own line, in its own traceback


def test_a_constant_that_passes_kernelbenchs_comparison_alone_is_degenerate_there_alone(pool):
    """A softmax over 16384 columns at bf16: every value near 6e-5, under KernelBench's 1e-2, so a constant passes
    its comparison; against the float32 truth, held to the outputs' size, it does not. Flagged degenerate, the
    problem left the kforge rows' fast_p too, and fast_0 read above the correct rate."""
    src = problem("softmax", "torch.softmax(x, dim=1)", n=8, d=16384)
    audit = Verifier(fast_config(require_kernel=False, precision="bf16"), pool=pool).audit(src, "cpu")
    assert "degenerate_kernelbench" in audit.flags and "degenerate" not in audit.flags, audit.flags
