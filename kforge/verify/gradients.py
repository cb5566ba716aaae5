"""A training step's gradients against the reference's (the backward mode, `kforge.verify.backward`).

Each gradient is checked as an output is: its presence, type, shape, dtype and device, then
``|g - ref| <= atol' + rtol * |ref|`` elementwise (NaN/Inf never pass), then that it is not constant where the
reference's varies. ``(atol, rtol)`` come from the gradient's dtype by the table the outputs use
(`VerifyConfig.tolerance`, with the problem's own and the command line's overrides), and ``atol`` is scaled by the
size of the reference gradient, its root mean square (RMS); at a reduced precision the reference is the float32
truth's gradient (`compare`'s ``truths``) and one outside the tolerance may still match PyTorch's own accuracy:

    atol' = atol * rms(ref)          (atol itself where the reference gradient is all zero)

Why: a gradient sums the upstream gradient over everything its element fed in the forward, its reduction length
L (N for ``A`` of an ``(M, K) @ (K, N)`` product, the batch for a normalisation's weight, the row for a softmax's
input). With a unit normal upstream gradient such a sum has an RMS of about sqrt(L) times its terms', and its
rounding error grows with it (about sqrt(L) u times the terms' size in any summation order, u the unit
roundoff), so the same relative accuracy allows an absolute error that grows as the RMS does. A gradient of unit
size keeps the forward's tolerance exactly; a tiny one (a softmax's over 98,304 columns, RMS ~1e-5) is held to
its own size rather than to 1e-4, which any small gradient would pass. A silent TF32 or half-precision backward,
with errors of 5e-4 of the gradient's size and more, still fails the fp32 tolerance (1e-4).
"""

from __future__ import annotations

import math
from typing import Callable

from ..sandbox.harness import HarnessVerdict
from .backward import StepReport
from .compare import Mismatch, check_degenerate, check_plain_tensor, compare_tensor, error_stats, rms, unresolved
from .numerics import NATIVE_SLACK, SIGNAL, UNRESOLVED_NOTE


def integrity(report: StepReport, where: str) -> None:
    """What the candidate's step did beside its results that no honest step does."""
    if report.grad_written:
        raise HarnessVerdict("cheat_detected", f"the candidate wrote the .grad of {', '.join(report.grad_written)} "
                             f"itself ({where}); gradients are what autograd gives back, not what a program leaves "
                             "in .grad", rule="grad_written")
    if report.upstream_changed:
        raise HarnessVerdict("cheat_detected", "the candidate's backward changed the upstream gradient of output "
                             f"{', '.join(map(str, report.upstream_changed))} in place ({where}); the reference leaves "
                             "it as it was", rule="input_mutation")
    if report.outputs_changed:
        raise HarnessVerdict("cheat_detected", "the candidate's backward changed output "
                             f"{', '.join(map(str, report.outputs_changed))} in place after returning it ({where}): "
                             "a tensor saved for the backward and overwritten there is the caller's result",
                             rule="saved_tensor_mutated")


def compare(torch, labels: list[str], grads: list, refs: list, where: str, device,
            tolerance: Callable[[str], tuple[float, float]], truths: list | None = None,
            own_names: list[str] | None = None) -> list[str]:
    """Raise a ``shape_mismatch`` or ``numerical_mismatch`` verdict naming the first gradient that fails, and where;
    else return notes. ``tolerance(dtype name)`` is the outputs' (atol, rtol). ``truths``: at a reduced precision
    the float32 truth's gradients, which the values are judged against (``refs``, the reference's own in the
    precision, then give the structure, and the accuracy a gradient outside the tolerance may still match).
    ``own_names``: the candidate's parameters, to say so where it has none of a trained parameter's name."""
    notes: list[str] = []
    for k, (label, g, r) in enumerate(zip(labels, grads, refs)):
        if r is None:  # the reference's output does not depend on it: the candidate's must not either
            if isinstance(g, torch.Tensor) and bool((g != 0).any()):
                raise HarnessVerdict("numerical_mismatch", f"the gradient of {label} is not zero ({where}), while no "
                                     "output of the reference depends on it",
                                     evidence={"mismatch": {"trial": where, "gradient": label}})
            continue
        if g is None and own_names is not None and label.startswith("parameter ") \
                and label.removeprefix("parameter ") not in own_names:
            shown = ", ".join(own_names[:6]) + (", ..." if len(own_names) > 6 else "") if own_names else "none"
            raise HarnessVerdict("shape_mismatch", f"the gradient of {label} is missing ({where}): ModelNew has no "
                                 f"parameter of that name (its own: {shown}); a training step is judged on the "
                                 "reference's parameters by name, and the weights are shared by name too: keep them "
                                 "on ModelNew under the reference's names", evidence={"mismatch": {"trial": where,
                                                                                                  "gradient": label}})
        if g is None:
            raise HarnessVerdict("shape_mismatch", f"the gradient of {label} is missing ({where}): no output of the "
                                 "candidate's depends on it through autograd (an output computed outside autograd, or "
                                 "detached: wrap the kernels in a torch.autograd.Function whose backward returns it"
                                 + ("; keep the reference's parameters, with the same names, on ModelNew"
                                    if label.startswith("parameter") else "") + ")",
                                 evidence={"mismatch": {"trial": where, "gradient": label}})
        try:
            note = _check(torch, label, g, r, device, tolerance, truths[k] if truths else None)
            notes += [note] if note else []
        except Mismatch as m:
            state = {"shape": "shape_mismatch", "numerical": "numerical_mismatch"}.get(m.kind, "cheat_detected")
            details = {k: v for k, v in m.details.items() if k != "output"}
            raise HarnessVerdict(state, f"{m.message} ({where})", rule=None if state != "cheat_detected" else
                                 "output_not_plain_tensor",
                                 evidence={"mismatch": {"trial": where, "gradient": label, **details}}) from None
    return notes


def _check(torch, label: str, g, r, device, tolerance, truth=None) -> str | None:
    try:
        check_plain_tensor(g, 0)
    except Mismatch as m:
        raise Mismatch(m.kind, m.message.replace("output 0", f"the gradient of {label}", 1)) from None
    if tuple(g.shape) != tuple(r.shape):
        raise Mismatch("shape", f"the gradient of {label} has shape {tuple(g.shape)}, expected {tuple(r.shape)}",
                       {"got_shape": list(g.shape), "expected_shape": list(r.shape)})
    if g.dtype != r.dtype:
        raise Mismatch("shape", f"the gradient of {label} has dtype {g.dtype}, expected {r.dtype}",
                       {"got_dtype": str(g.dtype), "expected_dtype": str(r.dtype)})
    if g.device.type != device.type:
        raise Mismatch("shape", f"the gradient of {label} is on {g.device}, expected {device.type}",
                       {"got_device": str(g.device)})
    atol, rtol = tolerance(str(r.dtype).removeprefix("torch."))
    native, r = (r, truth) if truth is not None else (None, r)
    size = rms(r) if r.is_floating_point() else 0.0
    scaled = atol * size if size > 0 else atol
    note = None
    try:
        try:
            compare_tensor(g, r, scaled, rtol)
        except Mismatch as m:
            note = _as_accurate_as_native(m, g, r, native, label, size)
            if note is None:
                raise
        check_degenerate(g, r, native=native)
    except Mismatch as m:
        details = dict(m.details, grad_rms=size) if m.kind == "numerical" else m.details
        raise Mismatch(m.kind, m.message.replace("output 0", f"the gradient of {label}", 1)
                       .replace(f"atol={scaled:g}", f"atol={scaled:.3g} (= {atol:g} x its RMS {size:.3g})", 1),
                       details) from None
    return note


def _as_accurate_as_native(m: Mismatch, g, truth, native, label: str, size: float) -> str | None:
    """A note where a gradient outside the tolerance of the truth is as accurate as the reference's own in the
    precision (`NATIVE_SLACK` and `SIGNAL`, as for the outputs: `kforge.verify.numerics`); else None, the mismatch
    then saying how far the reference's own was. ``size``: the truth's RMS."""
    if native is None or "max_abs_err" not in m.details:
        return None
    n_max, n_rms = error_stats(native, truth)
    if not math.isfinite(n_max) or n_max == 0.0:
        return None
    c_max, c_rms = error_stats(g, truth)
    if c_rms > SIGNAL * size and not unresolved(n_rms, size):
        m.message += (f"; its RMS error {c_rms:.3g} is over {SIGNAL:g} of the truth's RMS {size:.3g}, so PyTorch's "
                      f"own accuracy in the precision (max {n_max:.3g}, RMS {n_rms:.3g}) does not excuse it")
        return None
    if c_max <= NATIVE_SLACK * n_max and c_rms <= NATIVE_SLACK * n_rms:
        return (f"the gradient of {label} is outside the tolerance of the float32 truth (max abs err {c_max:.3g}, RMS "
                f"{c_rms:.3g}) but as accurate as PyTorch's own in the precision (max {n_max:.3g}, RMS {n_rms:.3g})"
                + (UNRESOLVED_NOTE if unresolved(n_rms, size) else ""))
    m.message += (f"; PyTorch's own is at most {n_max:.3g} from the truth (RMS {n_rms:.3g}), this one {c_max:.3g} "
                  f"(RMS {c_rms:.3g}): more than {NATIVE_SLACK:g}x")
    m.details.update(rms_err=c_rms, native_max_abs_err=n_max, native_rms_err=n_rms)
    return None
