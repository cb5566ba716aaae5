"""The chunked output comparison gives the same answers as comparing whole tensors."""

import math

import pytest
import torch

from kforge.verify import compare
from kforge.verify.compare import Mismatch, check_degenerate, compare_tensor


@pytest.fixture
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK", 7)


def test_chunks_find_the_same_worst_element(tiny_chunks):
    ref = torch.randn(5, 11)
    out = ref.clone()
    out[1, 3] += 0.5
    out[4, 10] += 2.0
    with pytest.raises(Mismatch) as e:
        compare_tensor(out, ref, 1e-4, 1e-4)
    d = e.value.details
    assert d["mismatched"] == 2 and d["index"] == [4, 10] and math.isclose(d["max_abs_err"], 2.0, rel_tol=1e-5)


def test_chunks_report_nan_and_integers(tiny_chunks):
    ref = torch.randn(30)
    out = ref.clone()
    out[20] = float("nan")
    with pytest.raises(Mismatch, match=r"1 NaN/Inf .*\(NaN: output elements left unwritten, which read as NaN, or computed as NaN\)"):
        compare_tensor(out, ref, 1e-4, 1e-4)
    # an inf was written, not left: a sum that overflowed float16 (poisoned memory reads as NaN)
    half = ref.half()
    summed = half.clone()
    summed[3] = float("inf")
    with pytest.raises(Mismatch, match=r"1 NaN/Inf .*\(all of them inf: an overflow, torch.float16 holds at most 65504\)"):
        compare_tensor(summed, half, 1e-2, 1e-2)
    summed[5] = float("nan")
    with pytest.raises(Mismatch, match=r"2 NaN/Inf .*\(1 of them inf: .*; the NaN ones unwritten or computed as NaN\)"):
        compare_tensor(summed, half, 1e-2, 1e-2)
    a = torch.arange(30)
    b = a.clone()
    b[9] = -1
    with pytest.raises(Mismatch, match="1 of 30 integer"):
        compare_tensor(b, a, 0, 0)
    compare_tensor(a, a.clone(), 0, 0)


def test_non_contiguous_and_half_outputs(tiny_chunks):
    ref = torch.randn(6, 9).t()
    compare_tensor(ref.clone(), ref, 1e-4, 1e-4)
    h = torch.randn(40).half()
    compare_tensor(h.clone(), h, 1e-2, 1e-2)
    with pytest.raises(Mismatch):
        compare_tensor(h + 1, h, 1e-2, 1e-2)


def test_constant_output_where_the_reference_varies(tiny_chunks):
    with pytest.raises(Mismatch, match="constant"):
        check_degenerate(torch.zeros(20), torch.randn(20))
    check_degenerate(torch.zeros(20), torch.zeros(20))


def test_where_the_reference_is_not_finite_the_output_must_be_too(tiny_chunks):
    """A log of zero is -inf and a log of a negative NaN: a "safe log" that writes 0 there is another function."""
    x = torch.randn(40)
    ref = torch.log(torch.relu(x))
    compare_tensor(ref.clone(), ref, 1e-4, 1e-4)  # the same infinities pass
    compare_tensor(ref.bfloat16(), ref, 1e-2, 1e-2)  # beside a float32 truth too
    with pytest.raises(Mismatch, match=r"element\(s\) where the reference is inf or NaN hold another value") as e:
        compare_tensor(torch.nan_to_num(ref, neginf=0.0), ref, 1e-4, 1e-4)
    assert e.value.details["mismatched"] == int((x <= 0).sum())
    nan_ref = torch.log(x)
    compare_tensor(nan_ref.clone(), nan_ref, 1e-4, 1e-4)  # NaN where the reference is NaN: kforge's view
    with pytest.raises(Mismatch, match="hold another value"):
        compare_tensor(torch.nan_to_num(nan_ref, nan=0.0), nan_ref, 1e-4, 1e-4)
    # KernelBench's torch.allclose has equal_nan=False: a NaN in its reference is never matched
    with pytest.raises(Mismatch, match=r"NaN in the reference, which KernelBench's allclose \(equal_nan=False\)"):
        compare_tensor(nan_ref.clone(), nan_ref, 1e-2, 1e-2, nan_never_equal=True)
    compare_tensor(ref.clone(), ref, 1e-2, 1e-2, nan_never_equal=True)  # equal infinities it does match


def test_the_element_shown_is_the_one_furthest_outside_its_allowance(tiny_chunks):
    """A large value's error may be the largest and within its relative allowance: an fp16 matmul's -46720 against
    -46688 was shown as the failure, while what failed was an element near zero from cancellation."""
    ref = torch.tensor([-46720.0, 5.0, -0.0625, 3.0])
    out = torch.tensor([-46688.0, 5.0, -0.108, 3.0])
    with pytest.raises(Mismatch, match=r"1 of 4 elements .*\(max abs err 32\)") as e:
        compare_tensor(out, ref, 1e-2, 1e-2)
    d = e.value.details
    assert d["index"] == [2] and d["expected"] == pytest.approx(-0.0625) and d["got"] == pytest.approx(-0.108)
    assert d["max_abs_err"] == pytest.approx(32.0) and d["allowed"] == pytest.approx(1e-2 + 1e-2 * 0.0625)


def test_kernelbenchs_allclose_scales_by_the_candidate_in_the_dtype_and_compares_integers_too():
    """KernelBench calls ``torch.allclose(reference, candidate, atol, rtol)``: a quantizer's 957 for 956 is within 1e-2
    of 957, and 5.25 for 5.1875 in bf16 is within 1e-2 of 5.25 though not of 5.1875; kforge's own formula (rtol of
    the reference) failed both under the kernelbench rules."""
    from kforge.verify.compare import kernelbench_allclose
    assert kernelbench_allclose(torch.tensor([957, 1000]), torch.tensor([956, 1000]), 1e-2, 1e-2) is True
    assert kernelbench_allclose(torch.tensor([3, 1000]), torch.tensor([2, 1000]), 1e-2, 1e-2) is False
    ref, out = torch.tensor([5.1875], dtype=torch.bfloat16), torch.tensor([5.25], dtype=torch.bfloat16)
    assert kernelbench_allclose(out, ref, 1e-2, 1e-2) is True and kernelbench_allclose(ref, out, 1e-2, 1e-2) is False
    assert kernelbench_allclose(out.float(), ref, 1e-2, 1e-2) is None  # its call raises on two dtypes
    assert kernelbench_allclose(torch.tensor([float("nan")]), torch.tensor([float("nan")]), 1e-2, 1e-2) is False
