"""The dataflow tracker on its own: which outputs derive from memory the candidate's kernels wrote."""

import ctypes
import time
from pathlib import Path

import pytest
import torch

from kforge.sandbox import budget as budgets
from kforge.sandbox.budget import BudgetSpent, budget, spent
from kforge.verify.dataflow import Dataflow


def traced(fn):
    flow = Dataflow(torch, lambda: None)
    with flow:
        out = fn(flow)
    return flow.reaches(out)


def kernel(flow, fn, *args):
    """A call into 'the candidate's kernel': what the recorder routes extension calls through."""
    return flow.candidate_call(lambda: fn(*args), args, {})


def raw_relu(x, y):
    """Writes y through its raw pointer, out of the dispatcher's sight, as compiled code does."""
    vals = torch.relu(x).numpy().tobytes()  # computing is allowed here; the write below is what counts
    ctypes.memmove(y.data_ptr(), vals, len(vals))


def test_a_traced_call_stops_at_the_budget_where_the_alarm_cannot_reach_it(monkeypatch):
    """No alarm armed (as none reaches a CUDA backward, whose operators run on autograd's thread while the main
    thread waits in C++): the tracer's own check ends a call that runs past its budget, between two operators."""
    monkeypatch.setattr(budgets, "_arm", lambda: None)
    x = torch.randn(256)
    with pytest.raises(BudgetSpent) as exc:
        with budget("attribution", 0.2) as b:
            with Dataflow(torch, lambda: None):
                give_up = time.monotonic() + 10
                while time.monotonic() < give_up:
                    x = x * 1.0
    assert spent(exc.value, b) and time.monotonic() < give_up


def test_pytorch_alone_is_not_derived():
    x = torch.randn(64)
    assert traced(lambda f: torch.relu(x) * 2) is False


def test_a_kernel_writing_its_output_is_derived_and_flows_through_torch_ops():
    x = torch.randn(64)

    def run(f):
        y = torch.empty_like(x)
        kernel(f, raw_relu, x, y)
        return (y + 1).view(8, 8)  # a torch tail after the kernel keeps the derivation
    assert traced(run) is True


def test_a_kernel_on_a_dummy_tensor_does_not_make_torchs_answer_derived():
    x, dummy = torch.randn(64), torch.randn(4)

    def run(f):
        kernel(f, raw_relu, dummy, torch.empty_like(dummy))
        return torch.clamp(x, min=0)
    assert traced(run) is False


def test_cpp_that_calls_a_torch_operator_is_not_the_candidates_work():
    x = torch.randn(64)
    # The "extension" returns what torch::relu produced inside it: the operator is seen, its output kept.
    assert traced(lambda f: kernel(f, torch.relu, x)) is False


def test_a_no_op_write_leaves_no_trace_and_an_overwrite_removes_one():
    x = torch.randn(64)

    def noop(f):
        y = torch.relu(x)
        kernel(f, lambda t: t.mul_(1.0), y)  # same values back: nothing changed
        return y
    assert traced(noop) is False

    def overwritten(f):
        y = torch.empty_like(x)
        kernel(f, raw_relu, x, y)
        y.copy_(torch.relu(x))  # PyTorch's answer replaces the kernel's, whole
        return y
    assert traced(overwritten) is False


def test_raw_pointer_arguments_are_followed():
    x = torch.randn(64)

    def run(f):
        y = torch.empty_like(x)
        kernel(f, lambda a, b, n: raw_relu(x, y), x.data_ptr(), y.data_ptr(), x.numel())
        return y
    assert traced(run) is True


def test_an_operator_the_candidate_registered_counts_as_its_kernel():
    lib = torch.library.Library("kforge_test_flow", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    x = torch.randn(8)
    assert traced(lambda f: torch.ops.kforge_test_flow.twice(x)) is True


def test_fingerprints_see_any_changed_byte_of_any_storage():
    """One changed byte anywhere in a storage (8-byte aligned or not, whole words or a tail) changes its
    fingerprint and changing it back restores it (a storage is only ever compared with itself); swapped words
    differ."""
    flow = Dataflow(torch, lambda: None)
    for nbytes in (1, 3, 4, 7, 8, 12, 4096 + 5):
        for shift in (0, 1, 4):  # memory not at an 8-byte boundary: the storage's own pointer is misaligned
            buf = bytearray(range(256)) * (nbytes // 256 + 1)
            t = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes - shift if nbytes > shift else nbytes,
                                 offset=shift if nbytes > shift else 0)
            before = flow.fingerprint(t)
            for at in {0, t.numel() // 2, t.numel() - 1}:
                t[at] += 1
                assert flow.fingerprint(t) != before, (nbytes, shift, at)
                t[at] -= 1
            assert flow.fingerprint(t) == before
    words = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    assert flow.fingerprint(words) != flow.fingerprint(torch.tensor([2, 1, 3, 4], dtype=torch.int32))


def raw_shifted_relu(x, y):
    """An honest fused kernel on a problem whose answer is all zeros: it writes every element of y, each a zero."""
    raw_relu(x - 1e3, y)


def test_a_kernel_writing_the_zeros_its_output_was_filled_with_cannot_be_told_apart():
    """Its writes equal the fill, so its output is neither derived nor PyTorch's: None, with a note saying why."""
    x = torch.randn(64)

    def allocated_inside(f):  # C++ that allocates torch::zeros, then loops writing max(0, ...)
        def fused(a):
            out = torch.zeros_like(a)
            raw_shifted_relu(a, out)
            return out
        return kernel(f, fused, x)

    def handed_in(f):  # Python allocates the output, the kernel writes it through its pointer
        out = torch.zeros(8, 8)
        kernel(f, lambda a, p: raw_shifted_relu(a, out), x, out.data_ptr())
        return out.view(64).clone()  # PyTorch operators after it keep "cannot tell"

    for run in (allocated_inside, handed_in):
        flow = Dataflow(torch, lambda: None)
        with flow:
            out = run(flow)
        assert not out.any() and flow.reaches(out) is None, run.__name__
        assert "cannot be told" in flow.notes[0] and "constant 0" in flow.notes[0], flow.notes


def test_a_fill_the_kernel_never_had_or_pytorch_replaced_is_still_pytorchs():
    x = torch.randn(64)

    def zeros_beside_a_dummy(f):  # the kernel runs on a dummy; the zeros it never saw are the answer
        kernel(f, raw_relu, x, torch.empty_like(x))
        return torch.zeros(64)
    assert traced(zeros_beside_a_dummy) is False

    def replaced(f):
        out = torch.zeros(64)
        kernel(f, lambda t: None, out)  # had it, wrote nothing...
        out.copy_(torch.clamp(x - 1e3, min=0))  # ...and PyTorch's answer (zeros too) replaces the fill
        return out
    assert traced(replaced) is False

    def added_to_torchs_answer(f):
        z = torch.zeros(64)
        kernel(f, lambda t: None, z)
        return torch.relu(x) + z  # not a constant: the fill is not the answer
    assert traced(added_to_torchs_answer) is False


# A matmul, minus a constant, times a constant, then ReLU, at a size where the shift sends every value below zero:
# the answer is all zeros for every input (the idioms' own problem file, at its cpu size).
ALL_ZEROS_PROBLEM = Path(__file__).resolve().parents[1] / "idioms" / "problems" / "9_matmul_subtract_multiply_relu.py"

FUSED_CANDIDATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

fused_cpp_source = """
#include <torch/extension.h>
#include <algorithm>

torch::Tensor linear_sub_mul_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                                  double subtract_value, double multiply_value) {
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D float32 tensor");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    const int64_t B = xc.size(0), K = xc.size(1), N = wc.size(0);
    auto out = torch::zeros({B, N}, xc.options());
    const float* xp = xc.data_ptr<float>();
    const float* wp = wc.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const float sub = static_cast<float>(subtract_value), mul = static_cast<float>(multiply_value);
    #pragma omp parallel for collapse(2)
    for (int64_t i = 0; i < B; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            float acc = bp[j];
            for (int64_t k = 0; k < K; ++k) {
                acc += xp[i * K + k] * wp[j * K + k];
            }
            op[i * N + j] = std::max(0.0f, (acc - sub) * mul);
        }
    }
    return out;
}
"""


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value
        self.fused = load_inline(
            name="kf_flow_linear_sub_mul_relu",
            cpp_sources=[fused_cpp_source],
            functions=["linear_sub_mul_relu"],
            extra_cflags=["-O3", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )

    def forward(self, x):
        return self.fused.linear_sub_mul_relu(x, self.linear.weight, self.linear.bias,
                                              self.subtract_value, self.multiply_value)
'''


def test_an_honest_fused_kernel_on_an_all_zeros_problem_is_not_accused(pool):
    """Its extension allocates torch::zeros and writes max(0, ...) into every element: zeros over the zero fill.
    The dataflow cannot tell (None, with the note), so no rule accuses it; the problem is flagged degenerate."""
    from kforge.problems import load_problem_file
    from kforge.verify import State, Verifier
    from tests.helpers import fast_config
    p = load_problem_file(ALL_ZEROS_PROBLEM, size="cpu")
    v = Verifier(fast_config(trials=3), pool=pool).verify(p, FUSED_CANDIDATE, "cpu")
    assert v.state is State.CORRECT, v.summary()
    assert v.attribution.output_from_kernel is None and "degenerate" in v.problem_flags, v.summary()
    assert any("cannot be told" in n for n in v.attribution.notes), v.attribution.notes


def test_next_pass_judges_one_pass_and_starts_the_next_afresh():
    """A training step: the forward's output derives from the kernel; a gradient PyTorch computes from that output
    in the backward does not derive from anything the candidate's kernels wrote there, and one a kernel writes
    in the backward does."""
    x = torch.randn(64)
    flow = Dataflow(torch, lambda: None)
    with flow:
        y = torch.empty_like(x)
        kernel(flow, raw_relu, x, y)
        assert flow.next_pass([y]) is True
        g = torch.ones(64) * (y > 0)  # PyTorch's backward, from the kernel's saved output
        assert flow.next_pass([g]) is False
        dx = torch.empty_like(x)
        kernel(flow, raw_relu, g, dx)  # the backward's own kernel
        assert flow.next_pass([dx]) is True
