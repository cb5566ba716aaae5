"""The backward mode: a training step's pieces in this process, then verdicts end to end on the cpu backend."""

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from kforge.problems import resolve_problem
from kforge.verify import State, Verifier
from kforge.verify.backward import BACKWARD, FORWARD, Backward, Upstream
from kforge.verify.verifier import ProblemFails
from tests.helpers import candidate, fast_config


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([2.0, 3.0]))
        self.frozen = nn.Parameter(torch.ones(2), requires_grad=False)

    def forward(self, x, n):
        return x * self.scale * n, (x > 0).sum()


def test_upstream_is_drawn_per_seed_not_as_the_inputs_are():
    up = Upstream(torch)
    out = [torch.empty(4, 8), torch.empty(3, dtype=torch.int64)]
    up.reseed(7)
    first = up.gradients(out)
    assert first[1] is None and first[0].shape == (4, 8)
    again = Upstream(torch)
    again.reseed(7)
    assert torch.equal(again.gradients(out)[0], first[0])  # same seed, same gradient: reference and candidate agree
    up.reseed(8)
    assert not torch.equal(up.gradients(out)[0], first[0])
    torch.manual_seed(7)  # the inputs of seed 7 are drawn so: the gradient must not be them
    assert not torch.equal(torch.randn(4, 8), first[0])


def test_a_step_returns_outputs_then_a_gradient_per_floating_input_and_trained_parameter():
    ref = Affine()
    plan = Backward(torch, ref, [torch.randn(2), 3])
    assert plan.labels == ["input 0", "parameter scale"]  # the int input and the frozen parameter are not trained
    plan.upstream.reseed(1)
    x = torch.randn(2)
    flat = plan.step(ref)(x, 3)
    (y, count), (dx, dscale) = plan.split(flat)
    g = plan.upstream.gradients([y])[0]
    assert torch.allclose(dx, g * ref.scale * 3) and torch.allclose(dscale, g * x * 3)
    assert not x.requires_grad and ref.scale.grad is None  # nothing left in .grad: autograd.grad, not backward()


def test_a_reference_with_nothing_to_differentiate_is_the_problems_error():
    from kforge.sandbox.harness import HarnessVerdict

    class Counts(nn.Module):
        def forward(self, x):
            return (x > 0).sum(dim=-1)
    plan = Backward(torch, Counts(), [torch.randn(3)])
    with pytest.raises(HarnessVerdict, match="no output of the reference carries a gradient"):
        plan.step(Counts())(torch.randn(3))


def test_the_candidates_step_reports_what_it_wrote_in_place():
    class WritesGrad(nn.Module):
        def forward(self, x):
            x.grad = torch.ones_like(x)
            return x * 2
    plan = Backward(torch, WritesGrad(), [torch.randn(3)])
    plan.upstream.reseed(3)
    plan.step(WritesGrad(), own=True)(torch.randn(3))
    assert plan.report.grad_written == ["input 0"] and not plan.report.outputs_changed


def test_a_profiled_step_runs_each_pass_in_its_range():
    from torch.autograd.profiler import profile
    ref = nn.Linear(8, 4)
    plan = Backward(torch, ref, [torch.randn(2, 8)])
    plan.upstream.reseed(5)
    step = plan.step(ref)
    with profile(use_kineto=True) as prof:
        step(torch.randn(2, 8))
    names = [e.name for e in prof.function_events]
    assert FORWARD in names and BACKWARD in names
    step(torch.randn(2, 8))  # without a profiler: no range is opened (it would cost a timed step microseconds)


# -- end to end, through worker processes ---------------------------------------------------------------
@pytest.fixture(scope="module")
def verifier(pool):
    return Verifier(fast_config(backward=True), pool=pool)


@pytest.fixture(scope="module")
def relu():
    return resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 8, "DIM": 4096})


def test_a_backward_kernel_that_gives_autograds_gradient_is_correct_and_timed_as_a_training_step(verifier, relu):
    v = verifier.verify(relu, candidate("cpu", "relu_backward_ok.py"), "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert v.runtime and v.ref and v.runtime.n >= 3
    a = v.attribution
    assert a.kernel_share and a.backward_share and a.output_from_kernel and a.gradient_from_kernel, a
    assert "backward alone" in v.summary()


def test_a_wrong_gradient_is_a_numerical_mismatch_naming_the_gradient_and_where(verifier):
    norm = resolve_problem("level1/3_LayerNorm", size="cpu", overrides={"BATCH": 16, "DIM": 64})
    v = verifier.verify(norm, candidate("cpu", "layernorm_backward_wrong.py"), "cpu")
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()
    m = v.evidence.mismatch
    assert m["gradient"] == "input 0" and "the gradient of input 0" in v.message, v.summary()
    assert len(m["index"]) == 2 and m["max_abs_err"] > m["atol"] and m["grad_rms"] > 0, m


def test_a_forward_only_program_has_no_gradient(verifier, relu):
    v = verifier.verify(relu, candidate("cpu", "relu_ok.py"), "cpu")
    assert v.state is State.SHAPE_MISMATCH and "the gradient of input 0 is missing" in v.message, v.summary()


def test_a_straight_through_gradient_is_not_the_candidates_work_but_kernelbench_counts_it(verifier, relu):
    path = Path(__file__).parents[1] / "exploits" / "cpu" / "backward_straight_through.py"
    v = verifier.verify(relu, path.read_text(), "cpu")
    assert v.state is State.KERNEL_UNUSED and v.rule == "backward_kernel_not_run", v.summary()
    assert v.states["kernelbench"] == "correct" and v.attribution.backward_share == 0.0, v.states


def test_a_problem_with_nothing_to_differentiate_is_refused(verifier, tmp_path):
    problem = tmp_path / "count_positive.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                       "        return (x > 0).sum(dim=-1)\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n\n"
                       "def get_init_inputs():\n    return []\n")
    with pytest.raises(ProblemFails, match="nothing to check"):
        verifier.verify(resolve_problem(str(problem)), candidate("cpu", "relu_backward_ok.py"), "cpu")


def test_a_state_that_keeps_the_graph_of_the_call_before_has_no_second_training_step(verifier):
    """KernelBench's VanillaRNN keeps `self.hidden` undetached: its trials' second training step backpropagates into
    the first's freed graph. That failed inside the trials, after the candidate ran, and was the candidate's
    `runtime_error` ("the worker failed during correctness") whatever it did: it is the problem's, before it runs."""
    problem = resolve_problem(str(Path(__file__).parents[1] / "idioms" / "problems" / "33_vanilla_rnn.py"))
    copy = problem.source.replace("class Model(", "class ModelNew(").replace("super(Model, self)", "super(ModelNew, self)")
    with pytest.raises(ProblemFails, match="a second training step.*autograd graph of the call before"):
        verifier.verify(problem, copy, "cpu")
