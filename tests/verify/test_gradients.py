"""A training step's gradients against the reference's: the RMS-scaled tolerance, and what each failure says."""

import pytest
import torch

from kforge.sandbox.harness import HarnessVerdict
from kforge.verify.backward import StepReport
from kforge.verify.compare import rms
from kforge.verify.gradients import compare, integrity

CPU = torch.device("cpu")


def tol(dtype: str):
    return {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7), "bfloat16": (1e-2, 1e-2)}[dtype]


def check(grads, refs, labels=("input 0",)):
    compare(torch, list(labels), grads, refs, "correctness trial 0", CPU, tol)


def test_rms_ignores_what_is_not_finite():
    assert rms(torch.tensor([3.0, 4.0, float("nan"), float("inf")])) == pytest.approx((12.5) ** 0.5)
    assert rms(torch.zeros(5)) == 0.0
    assert rms(torch.tensor([3 + 4j, 0j])) == pytest.approx((12.5) ** 0.5)  # moduli: an FFT's output sizes the tolerance
    assert rms(torch.full((3,), 300.0, dtype=torch.bfloat16)) == 300.0


def test_the_absolute_tolerance_grows_with_the_gradients_size():
    torch.manual_seed(0)
    ref = torch.randn(1000) * 100.0  # a long reduction's size: RMS ~100
    check([ref + 5e-3], [ref])  # 5e-3 is within 1e-4 x RMS (~1e-2), as the reduction's rounding would be
    with pytest.raises(HarnessVerdict) as e:
        check([ref + 5e-2], [ref])  # 5x that is not: a TF32-sized error
    v = e.value
    assert v.state == "numerical_mismatch" and "the gradient of input 0" in v.message and "x its RMS" in v.message
    m = v.extra["evidence"]["mismatch"]
    assert m["gradient"] == "input 0" and m["grad_rms"] == pytest.approx(rms(ref)) and "index" in m


def test_a_tiny_gradient_is_held_to_its_own_size():
    ref = torch.full((100,), 1e-5) * torch.linspace(-1, 1, 100)  # a softmax's gradient over a long row
    with pytest.raises(HarnessVerdict):  # half of it: inside 1e-4 absolute, far outside its own size
        check([ref * 0.5], [ref])
    check([ref * (1 + 1e-6)], [ref])


def test_missing_zero_and_structural_failures_name_the_gradient():
    ref = torch.randn(4, 3)
    with pytest.raises(HarnessVerdict, match="the gradient of parameter w is missing") as e:
        check([ref, None], [ref, ref], labels=("input 0", "parameter w"))
    assert e.value.state == "shape_mismatch" and "same names" in e.value.message
    with pytest.raises(HarnessVerdict, match="has shape") as e:
        check([ref.t()], [ref])
    assert e.value.state == "shape_mismatch"
    with pytest.raises(HarnessVerdict, match="outside") as e:  # zeros: the values say it first
        check([torch.zeros_like(ref)], [ref])
    assert e.value.state == "numerical_mismatch"
    near = 5.0 + 1e-6 * torch.randn(4, 3)
    with pytest.raises(HarnessVerdict, match="constant"):  # a constant inside the tolerance: not a computation
        check([torch.full_like(near, 5.0)], [near])
    check([None], [None])  # no output depends on it, on either side
    with pytest.raises(HarnessVerdict, match="not zero"):
        check([ref], [None])


def test_what_no_honest_step_does_is_an_integrity_finding():
    integrity(StepReport(), "t")
    for report, rule in ((StepReport(grad_written=["input 0"]), "grad_written"),
                         (StepReport(upstream_changed=[0]), "input_mutation"),
                         (StepReport(outputs_changed=[0]), "saved_tensor_mutated")):
        with pytest.raises(HarnessVerdict) as e:
            integrity(report, "t")
        assert e.value.state == "cheat_detected" and e.value.extra["rule"] == rule


def test_a_parameter_modelnew_does_not_have_is_named_as_missing_from_it():
    """A candidate that renamed the reference's `weight` was told no output depends on it through autograd."""
    labels = ["input 0", "parameter weight"]
    grads, refs = [torch.ones(3), None], [torch.ones(3), torch.ones(3)]
    with pytest.raises(HarnessVerdict, match=r"ModelNew has no parameter of that name \(its own: scale_w, shift_b\)"):
        compare(torch, labels, grads, refs, "correctness trial 1 of 5", CPU, tol, own_names=["scale_w", "shift_b"])
    with pytest.raises(HarnessVerdict, match="depends on it through autograd"):
        compare(torch, labels, grads, refs, "correctness trial 1 of 5", CPU, tol, own_names=["weight"])
