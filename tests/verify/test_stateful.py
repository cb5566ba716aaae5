"""Stateful problems (a reference that keeps a hidden state between calls) are judged as KernelBench judges them."""

from pathlib import Path

import torch

from kforge.problems import problem_from_source, resolve_problem
from kforge.verify import Verifier
from kforge.verify.stateful import changed_in_place, held_tensors, held_values, reassigned, values_changed, versions
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


def test_an_in_place_update_is_found_by_its_version_counter():
    cell = Cell()
    before = versions(held_tensors(torch, cell))
    cell(torch.ones(2, 3))
    assert changed_in_place(before, held_tensors(torch, cell)) == ["steps"]
    plain = torch.nn.Linear(3, 3)
    before = versions(held_tensors(torch, plain))
    plain(torch.ones(2, 3))
    assert changed_in_place(before, held_tensors(torch, plain)) == []


# The reference itself as the candidate (no kernel: judged as KernelBench judges it, with the kernel check off).
FAITHFUL_COPY = (PROBLEMS / "33_vanilla_rnn.py").read_text().replace("class Model(", "class ModelNew(").replace(
    "super(Model, self)", "super(ModelNew, self)")


def test_a_faithful_copy_of_a_stateful_problem_is_correct_under_both_rule_sets(pool):
    """Both models fresh from one seed, then called in lockstep; the audit (which calls the reference many times)
    and timing (which calls both as often as it likes) leave no different histories to compare. The copy restates
    the file's `batch_size = 8`, which `__init__` sizes the hidden state by: at each shape variant the variant's
    batch counts (the copy was `runtime_error` on its first variant, on an H100 at KernelBench's sizes too)."""
    problem = resolve_problem(str(PROBLEMS / "33_vanilla_rnn.py"), size="cpu")
    v = Verifier(fast_config(trials=3, require_kernel=False, variants=True), pool=pool).verify(
        problem, FAITHFUL_COPY, "cpu")
    assert "stateful" in v.problem_flags and "stochastic" not in v.problem_flags, v.summary()
    assert v.states["kforge"] == v.states["kernelbench"] == "correct", v.summary()
    assert any("keeps state between calls" in n and "self.hidden" in n for n in v.evidence.notes), v.evidence.notes
    assert any(n.startswith("correct on shape variant(s) batch_size=") for n in v.evidence.notes), v.evidence.notes


def test_a_restated_constant_takes_the_variants_value_and_a_size_of_the_candidates_own_does_not():
    from kforge.verify.variant_constants import restated_take_the_variant
    namespace = {"batch_size": 8, "hidden_size": 64, "flag": True, "TILE": 32}
    restated_take_the_variant(namespace, {"batch_size": 5, "hidden_size": 95, "flag": 3, "TILE": 7},
                               {"batch_size": 8, "hidden_size": 128, "flag": 1, "TILE": 32})
    # restated: batch_size, TILE; its own (another value, another type): hidden_size, flag
    assert namespace == {"batch_size": 5, "hidden_size": 64, "flag": True, "TILE": 7}


# A model that normalises by a running mean it keeps in a buffer and updates in place on every call: its output
# follows its history, and no attribute is ever reassigned.
RUNNING_MEAN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int, momentum: float = 0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.running_mean.lerp_(x.mean(dim=0), self.momentum)
        return torch.relu(x - self.running_mean)


batch_size = 32
features = 96


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
"""


def test_state_kept_in_place_in_a_buffer_is_stateful_and_the_model_matches_itself(pool):
    """Judged against itself this model was `numerical_mismatch` at a timing recheck (flagged `stochastic`; the
    fresh candidate was given the timed reference's buffers), then at its first shape variant."""
    problem = problem_from_source(RUNNING_MEAN, where="running_mean.py", name="running_mean")
    copy = RUNNING_MEAN + "\n\nclass ModelNew(Model):\n    pass\n"
    v = Verifier(fast_config(trials=3, require_kernel=False, variants=True), pool=pool).verify(problem, copy, "cpu")
    assert "stateful" in v.problem_flags and "stochastic" not in v.problem_flags, v.summary()
    assert v.states["kforge"] == v.states["kernelbench"] == "correct", v.summary()
    assert any("self.running_mean" in n for n in v.evidence.notes), v.evidence.notes
    assert any("shape variant" in n for n in v.evidence.notes), v.evidence.notes


def test_batchnorm_in_training_mode_changes_its_buffers_but_is_not_stateful(pool):
    """Its running statistics change in place on every call, but in training mode its output comes from the batch."""
    source = RUNNING_MEAN.replace("self.register_buffer(\"running_mean\", torch.zeros(features))",
                                  "self.bn = nn.BatchNorm1d(features)").replace(
        "with torch.no_grad():\n            self.running_mean.lerp_(x.mean(dim=0), self.momentum)\n        return "
        "torch.relu(x - self.running_mean)", "return torch.relu(self.bn(x))")
    assert "BatchNorm1d" in source and "running_mean" not in source.split("class Model")[1].split("batch_size")[0]
    audit = Verifier(fast_config(require_kernel=False), pool=pool).audit(
        problem_from_source(source, where="bn.py", name="bn"), "cpu")
    assert "stateful" not in audit.flags and "stochastic" not in audit.flags, audit.flags


# What a model writes when it reads the reference as a normalisation against a mean that starts at zero.
FORGETS_ITS_HISTORY = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int, momentum: float = 0.1):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("running_mean", torch.zeros(features))

    def forward(self, x):
        # running_mean is zero before the update, so after it it is momentum * mean(x): fold that in directly
        return torch.relu(x - self.momentum * x.mean(dim=0))
'''


def test_a_candidate_that_ignores_the_state_fails_from_the_second_trial_under_both_rule_sets(pool):
    """KernelBench calls one pair of models once per trial, so its second trial compares second calls. kforge judged
    every trial on a fresh pair's first call, where this candidate is right, and called it `correct`."""
    problem = problem_from_source(RUNNING_MEAN, where="running_mean.py", name="running_mean")
    v = Verifier(fast_config(trials=5, require_kernel=False, skip_timing=True), pool=pool).verify(
        problem, FORGETS_ITS_HISTORY, "cpu")
    assert v.states["kforge"] == v.states["kernelbench"] == "numerical_mismatch", v.summary()
    assert "correctness trial 2 of 5" in v.message, v.message


# The running mean kept at module level, as a C++ extension keeps a `static`: it follows the calls, not the model.
STATE_OUTSIDE_THE_MODEL = '''
import torch
import torch.nn as nn

_running = {}


class ModelNew(nn.Module):
    def __init__(self, features: int, momentum: float = 0.1):
        super().__init__()
        self.momentum = momentum

    def forward(self, x):
        mean = _running.setdefault("mean", torch.zeros(x.shape[1], dtype=x.dtype, device=x.device))
        mean.lerp_(x.mean(dim=0), self.momentum)
        return torch.relu(x - mean)
'''


def test_state_kept_outside_the_model_is_told_at_a_fresh_models_first_call(pool):
    """Right while one pair is called in lockstep; wrong on the measured trials' freshly built pair, where the
    message said only "correctness trial 4 of 5", as if the fourth call had drifted."""
    problem = problem_from_source(RUNNING_MEAN, where="running_mean.py", name="running_mean")
    v = Verifier(fast_config(trials=5, require_kernel=False, skip_timing=True), pool=pool).verify(
        problem, STATE_OUTSIDE_THE_MODEL, "cpu")
    assert v.state.value == "numerical_mismatch", v.summary()
    assert "trial 4 of 5, the first call of a freshly built pair of models" in v.message, v.message


def test_at_tf32_the_native_reference_is_a_copy_so_each_model_is_called_once_a_trial(pool):
    """At TF32 (and on a GPU at fp32, where cuDNN's flags differ) a trial runs the exact reference and the native one:
    the same model called twice, whose second answer the kernelbench view took for the reference's, and a faithful
    copy of this model was `numerical_mismatch` there."""
    problem = problem_from_source(RUNNING_MEAN, where="running_mean.py", name="running_mean")
    copy = RUNNING_MEAN.replace("class Model(", "class ModelNew(")
    v = Verifier(fast_config(trials=4, require_kernel=False, precision="tf32"), pool=pool).verify(problem, copy, "cpu")
    assert v.states["kforge"] == v.states["kernelbench"] == "correct", v.summary()


def test_a_tensor_made_in_inference_mode_has_no_version_and_is_left_out():
    cell = Cell()
    with torch.inference_mode():
        cell.frozen = torch.zeros(3)
    before = versions(held_tensors(torch, cell))
    assert "frozen" not in before and "steps" in before
    cell(torch.ones(2, 3))
    assert changed_in_place(before, held_tensors(torch, cell)) == ["steps"]


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.5
        self.calls = 0
        self.seen = []
        self.masks = {}

    def forward(self, x):
        self.calls += 1
        self.seen.append(x.mean())
        self.masks.setdefault(x.shape[-1], torch.ones(x.shape[-1]))  # a cache: filled once per width
        return x * self.scale * self.calls


def test_a_counter_and_a_list_a_forward_changes_are_found_and_constants_are_not():
    model = Counter()
    model(torch.ones(2, 3))  # the cache is filled by the first call
    before = held_values(torch, model)
    model(torch.ones(2, 3))
    assert values_changed(before, held_values(torch, model)) == ["calls", "seen"]
    plain = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.1))
    before = held_values(torch, plain)
    plain(torch.ones(2, 3))
    assert values_changed(before, held_values(torch, plain)) == []


# A model that keeps its state in plain Python values: a step counter and a list of past batch means.
PLAIN_STATE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, growth):
        super().__init__()
        self.growth = growth
        self.step = 0
        self.history = []
        self.cache = {}

    def forward(self, x):
        self.step += 1
        self.history.append(x.mean(dim=0))
        self.cache.setdefault(x.shape[1], torch.ones(x.shape[1], device=x.device))
        center = torch.stack(self.history).mean(dim=0)
        return (x - center) * (1.0 + self.growth * self.step) * self.cache[x.shape[1]]


batch_size = 16
features = 256
growth = 0.5


def get_inputs():
    return [torch.randn(batch_size, features) + 1.0]


def get_init_inputs():
    return [growth]
'''

# As a model writes it: the same state, kept its own way (a tensor of sums and a count).
KEEPS_PLAIN_STATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, growth):
        super(ModelNew, self).__init__()
        self.growth = float(growth)
        self.n_calls = 0
        self.mean_sum = None

    def forward(self, x):
        self.n_calls += 1
        m = x.mean(dim=0)
        self.mean_sum = m if self.mean_sum is None else self.mean_sum + m
        return (x - self.mean_sum / self.n_calls) * (1.0 + self.growth * self.n_calls)
'''


def test_state_in_plain_values_is_stateful_and_a_candidate_keeping_it_is_correct(pool):
    """A counter (``self.step += 1``) and a list of past batch means were not seen as state: the reference called by
    the audit and earlier trials was compared with a fresh candidate, and this candidate was `numerical_mismatch`
    (the counter's problem also read as `stochastic`)."""
    problem = problem_from_source(PLAIN_STATE, where="plain_state.py", name="plain_state")
    v = Verifier(fast_config(trials=4, require_kernel=False, variants=True), pool=pool).verify(
        problem, KEEPS_PLAIN_STATE, "cpu")
    assert "stateful" in v.problem_flags and "stochastic" not in v.problem_flags, v.summary()
    assert v.states["kforge"] == v.states["kernelbench"] == "correct", v.summary()
    forgets = KEEPS_PLAIN_STATE.replace("self.n_calls += 1", "self.n_calls = 1")
    v = Verifier(fast_config(trials=4, require_kernel=False, skip_timing=True), pool=pool).verify(
        problem, forgets, "cpu")
    assert v.states["kforge"] == v.states["kernelbench"] == "numerical_mismatch", v.summary()


def test_a_history_the_output_follows_only_after_other_inputs_is_stateful(pool):
    """The mean of every batch mean seen answers the same batch twice alike: only a call on another batch between
    shows the history."""
    source = PLAIN_STATE.replace("self.step += 1", "pass")
    audit = Verifier(fast_config(require_kernel=False), pool=pool).audit(
        problem_from_source(source, where="history.py", name="history"), "cpu")
    assert "stateful" in audit.flags and "stochastic" not in audit.flags, audit.flags
    # a cache filled on each call whose output does not follow it is no state
    cache_only = PLAIN_STATE.replace("self.step += 1", "pass").replace("self.history.append(x.mean(dim=0))", "pass") \
        .replace("torch.stack(self.history).mean(dim=0)", "0.0")
    audit = Verifier(fast_config(require_kernel=False), pool=pool).audit(
        problem_from_source(cache_only, where="cache.py", name="cache"), "cpu")
    assert "stateful" not in audit.flags, audit.flags
