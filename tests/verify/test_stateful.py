"""Stateful problems (a reference that keeps a hidden state between calls) are judged as KernelBench judges them."""

from pathlib import Path

import torch

from kforge.problems import resolve_problem
from kforge.verify import Verifier
from kforge.verify.stateful import held_tensors, reassigned
from tests.helpers import fast_config

PROBLEMS = Path(__file__).parents[1] / "idioms" / "problems"


class Cell(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.zeros(2, 3)
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.hidden = torch.tanh(self.lin(x) + self.hidden)
        self.steps += 1  # in place: the same tensor, so not a reassignment
        return self.hidden


def test_a_reassigned_attribute_is_found_and_an_in_place_update_is_not():
    cell = Cell()
    before = held_tensors(torch, cell)
    cell(torch.ones(2, 3))
    assert reassigned(before, held_tensors(torch, cell)) == ["hidden"]
    plain = torch.nn.Linear(3, 3)
    before = held_tensors(torch, plain)
    plain(torch.ones(2, 3))
    assert reassigned(before, held_tensors(torch, plain)) == []


# The reference itself as the candidate (no kernel: judged as KernelBench judges it, with the kernel check off).
FAITHFUL_COPY = (PROBLEMS / "33_vanilla_rnn.py").read_text().replace("class Model(", "class ModelNew(").replace(
    "super(Model, self)", "super(ModelNew, self)")


def test_a_faithful_copy_of_a_stateful_problem_is_correct_under_both_rule_sets(pool):
    """Both models fresh from one seed per trial, one call each; the audit (which calls the reference many times)
    and timing (which calls both as often as it likes) leave no different histories to compare."""
    problem = resolve_problem(str(PROBLEMS / "33_vanilla_rnn.py"), size="cpu")
    v = Verifier(fast_config(trials=3, require_kernel=False), pool=pool).verify(problem, FAITHFUL_COPY, "cpu")
    assert "stateful" in v.problem_flags and "stochastic" not in v.problem_flags, v.summary()
    assert v.states["kforge"] == v.states["kernelbench"] == "correct", v.summary()
    assert any("keeps state between calls" in n and "self.hidden" in n for n in v.evidence.notes), v.evidence.notes
