"""Output checks run in the worker: structure, values within tolerance, NaN/Inf, degenerate outputs."""

from __future__ import annotations

import math
from typing import Any

import torch


class Mismatch(Exception):
    """An output check failed; ``kind`` is ``shape`` or ``numerical``; ``details`` go into the evidence."""

    def __init__(self, kind: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind, self.message, self.details = kind, message, details or {}


def as_outputs(out: Any) -> list[Any]:
    """A forward's outputs, flat: a tensor, or tuples/lists of them nested to any depth (an ``nn.LSTM`` returns
    ``(out, (h, c))``); every tensor in them is compared, the nested ones too."""
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in as_outputs(item)]
    return [out]


def check_plain_tensor(x: Any, index: int) -> None:
    """Outputs must be real, materialised tensors: no subclasses, no lazy wrappers, no sparse layouts."""
    if type(x) is not torch.Tensor:
        kind = "shape" if not isinstance(x, torch.Tensor) else "cheat"
        raise Mismatch(kind, f"output {index} is a {type(x).__module__}.{type(x).__qualname__}, "
                             "not a plain torch.Tensor", {"output": index})
    if x.layout is not torch.strided:
        raise Mismatch("shape", f"output {index} has layout {x.layout}, expected strided", {"output": index})


def check_structure(outs: list[Any], refs: list[torch.Tensor], device: torch.device, reduced: bool = False) -> None:
    """Each output a plain tensor of the reference's shape, dtype and device; ``reduced``: the inputs were cast to a
    reduced precision (a float32 reference output is then one its forward promoted)."""
    if len(outs) != len(refs):
        raise Mismatch("shape", f"forward returned {len(outs)} output(s), the reference returns {len(refs)}")
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(r, torch.Tensor):
            continue
        check_plain_tensor(o, i)
        if tuple(o.shape) != tuple(r.shape):
            raise Mismatch("shape", f"output {i} has shape {tuple(o.shape)}, expected {tuple(r.shape)}",
                           {"output": i, "got_shape": list(o.shape), "expected_shape": list(r.shape)})
        if o.dtype != r.dtype:
            # a kernel that computes in float32 and forgets the cast back is the common cause at bf16 or fp16
            fix = (f": give it back in the reference's dtype (`out.to({r.dtype})`, or the input's `.to(x.dtype)`)"
                   if o.is_floating_point() and r.is_floating_point() else "")
            if reduced and r.dtype == torch.float32 and o.dtype in (torch.bfloat16, torch.float16):
                # the input's dtype is what it returned: the reference's forward makes a float32 tensor of its own
                fix = (": the reference's output is float32 although its inputs are not (a tensor its forward makes "
                       "with the default dtype, `torch.randn`, `torch.ones`, `torch.arange`, promotes it): give it back "
                       "as float32 too (`out.float()`)")
            raise Mismatch("shape", f"output {i} has dtype {o.dtype}, expected {r.dtype}{fix}",
                           {"output": i, "got_dtype": str(o.dtype), "expected_dtype": str(r.dtype)})
        if o.device.type != device.type:
            raise Mismatch("shape", f"output {i} is on {o.device}, expected {device.type}",
                           {"output": i, "got_device": str(o.device)})


#: Elements compared at a time: the comparison's temporaries stay small beside outputs of many GiB.
CHUNK = 1 << 24


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _compare_exact(out: torch.Tensor, ref: torch.Tensor, o: torch.Tensor, r: torch.Tensor, index: int) -> None:
    """Integer outputs (an argmax's indices) compare exactly, chunk by chunk over the flattened ``o`` and ``r``."""
    n, pos = 0, None
    for s in range(0, o.numel(), CHUNK):
        bad = o[s:s + CHUNK] != r[s:s + CHUNK]
        c = int(bad.sum())
        if c and pos is None:
            pos = s + int(bad.nonzero()[0])
        n += c
    if n:
        raise Mismatch("numerical", f"output {index}: {n} of {out.numel()} integer elements differ",
                       _where(out, ref, pos, index, n))


def _off_nonfinite(oc: torch.Tensor, rc: torch.Tensor, nan_never_equal: bool) -> torch.Tensor:
    """Where the reference is not finite (a log of zero, a NaN it computes), the elements whose output differs: an
    infinity must be met by the same one and a NaN by a NaN; under KernelBench's ``allclose`` (``equal_nan``
    False, ``nan_never_equal``) no NaN is ever met."""
    special = ~torch.isfinite(rc)
    if not bool(special.any()):
        return special
    met = oc == rc if nan_never_equal else (oc == rc) | (torch.isnan(oc) & torch.isnan(rc))
    return special & ~met


def kernelbench_allclose(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> bool | None:
    """KernelBench's own decision, ``torch.allclose(reference, candidate, atol, rtol)``, a chunk at a time: its rtol
    scales the candidate's values, not the reference's, the arithmetic is in the tensors' own dtype (bf16 at bf16),
    and integer outputs are compared by it too (956 against 957 is within 1e-2 of 957). None where the shapes or
    dtypes differ: its call raises there, and the shape check speaks."""
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return None
    o, r = _flat(out.detach()), _flat(ref.detach())
    return all(torch.allclose(r[s:s + CHUNK], o[s:s + CHUNK], atol=atol, rtol=rtol) for s in range(0, o.numel(), CHUNK))


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, index: int = 0,
                   nan_never_equal: bool = False) -> None:
    """Raise `Mismatch` unless every element is within ``atol + rtol * |ref|``: finite where the reference is, and
    where it is not, the same infinity or NaN (`_off_nonfinite`).

    Works through the flattened tensors a chunk at a time, so comparing two 8 GiB outputs needs
    hundreds of MiB, not another 8 GiB for every temporary.
    """
    if out.numel() == 0:
        return
    o, r = _flat(out.detach()), _flat(ref.detach())
    if not (out.is_floating_point() or out.is_complex()):
        return _compare_exact(out, ref, o, r, index)
    n_nonfinite = n_inf = n_bad = n_range = n_special = n_nan_ref = 0
    first_nonfinite = first_range = first_special = None
    worst = (-1.0, 0)  # (abs err, position) of the largest error among finite reference values
    furthest = (-1.0, 0, 0.0)  # (error / allowance, position, allowance) of the failing element furthest outside
    max_rel = 0.0
    for s in range(0, o.numel(), CHUNK):
        oc, rc = o[s:s + CHUNK], r[s:s + CHUNK]
        ref_finite = torch.isfinite(rc)
        off = _off_nonfinite(oc, rc, nan_never_equal)
        if c := int(off.sum()):
            first_special = s + int(off.nonzero()[0]) if first_special is None else first_special
            n_special += c
            n_nan_ref += int(torch.isnan(rc).sum()) if nan_never_equal else 0
        if rc.dtype != oc.dtype:  # a float32 truth beside a half-precision output: beyond fp16's 65504 it is inf
            rounded = rc.to(oc.dtype)
            beyond = ref_finite & ~torch.isfinite(rounded)
            if bool(beyond.any()):
                wrong = beyond & (oc != rounded)  # the output must overflow as the truth does, to the same sign
                n_range += int(wrong.sum())
                if first_range is None and n_range:
                    first_range = s + int(wrong.nonzero()[0])
                ref_finite = ref_finite & ~beyond
        nonfinite = ~torch.isfinite(oc) & ref_finite
        c = int(nonfinite.sum())
        if c and first_nonfinite is None:
            first_nonfinite = s + int(nonfinite.nonzero()[0])
        n_nonfinite += c
        n_inf += int((torch.isinf(oc) & ref_finite).sum()) if c else 0
        if n_nonfinite:
            continue
        wide = torch.float32 if oc.dtype in (torch.float16, torch.bfloat16) else oc.dtype
        diff = (oc.to(wide) - rc.to(wide)).abs()
        allowed = atol + rtol * rc.abs().to(diff.dtype)
        bad = ~(diff <= allowed) & ref_finite  # ``~(<=)`` so that a NaN difference counts as bad
        c = int(bad.sum())
        if c:
            n_bad += c
            flat = torch.where(ref_finite, diff, torch.zeros_like(diff))
            p = int(torch.argmax(flat))
            if float(flat[p]) > worst[0]:
                worst = (float(flat[p]), s + p)
            # shown: not the largest error, which may be within its allowance (a large value's), but the failing one
            ratio = torch.where(bad, diff / allowed.clamp_min(1e-30), torch.zeros_like(diff))
            q = int(torch.argmax(ratio))
            if float(ratio[q]) > furthest[0]:
                furthest = (float(ratio[q]), s + q, float(allowed[q]))
            rel = diff / rc.abs().clamp_min(1e-12).to(diff.dtype)
            max_rel = max(max_rel, float(torch.where(ref_finite, rel, torch.zeros_like(rel)).max()))
    if n_special:
        why = (f"; {n_nan_ref} of them NaN in the reference, which KernelBench's allclose (equal_nan=False) never "
               "matches, whatever the output" if n_nan_ref else "")
        raise Mismatch("numerical", f"output {index}: {n_special} element(s) where the reference is inf or NaN hold "
                                    f"another value{why}", _where(out, ref, first_special, index, n_special))
    if n_range:
        raise Mismatch("numerical", f"output {index}: {n_range} element(s) where the truth is beyond {out.dtype}'s "
                                    "range (it rounds to inf there) hold another value",
                       _where(out, ref, first_range, index, n_range))
    if n_nonfinite:
        # Poisoned memory reads as NaN, so an inf was written: an overflow (fp16 sums pass 65504 soon)
        why = "NaN: output elements left unwritten, which read as NaN, or computed as NaN" if not n_inf else (
            f"{'all' if n_inf == n_nonfinite else n_inf} of them inf: an overflow, {out.dtype} holds at most "
            f"{torch.finfo(out.dtype).max:.6g}"
            + ("" if n_inf == n_nonfinite else "; the NaN ones unwritten or computed as NaN"))
        raise Mismatch("numerical", f"output {index}: {n_nonfinite} NaN/Inf value(s) where the reference is finite "
                                    f"({why})", _where(out, ref, first_nonfinite, index, n_nonfinite))
    if n_bad:
        details = _where(out, ref, furthest[1], index, n_bad)
        details.update(max_abs_err=worst[0], max_rel_err=max_rel, atol=atol, rtol=rtol, allowed=furthest[2])
        raise Mismatch("numerical", f"output {index}: {n_bad} of {out.numel()} elements outside atol={atol:g} "
                                    f"rtol={rtol:g} (max abs err {worst[0]:.3g})", details)


def error_stats(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(largest, RMS) absolute difference of ``out`` from ``ref`` over the elements where ``ref`` is finite in
    ``out``'s dtype too, in float32 or wider, a chunk at a time; (inf, inf) where ``out`` is not finite there."""
    o, r = _flat(out.detach()), _flat(ref.detach())
    worst, squares, n = 0.0, 0.0, 0
    for s in range(0, o.numel(), CHUNK):
        oc, rc = o[s:s + CHUNK], r[s:s + CHUNK]
        wide = torch.float32 if oc.dtype in (torch.float16, torch.bfloat16) else oc.dtype
        keep = torch.isfinite(rc) & (torch.isfinite(rc.to(oc.dtype)) if rc.dtype != oc.dtype else True)
        diff = (oc.to(wide) - rc.to(wide)).abs()[keep]
        if not bool(torch.isfinite(diff).all()):
            return float("inf"), float("inf")
        if diff.numel():
            worst = max(worst, float(diff.max()))
            squares += float(diff.double().square().sum())
            n += diff.numel()
    return worst, (squares / n) ** 0.5 if n else 0.0


def tolerances_off(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> float:
    """How many tolerances the worst element of ``out`` is from ``ref``: the largest ``|out - ref| / (atol + rtol *
    |ref|)`` over the elements finite in both (inf where ``out`` is not finite there), a chunk at a time. Unlike the
    largest and the RMS error, it weighs an error by the size of the value it is in."""
    o, r = _flat(out.detach()), _flat(ref.detach())
    worst = 0.0
    for s in range(0, o.numel(), CHUNK):
        oc, rc = o[s:s + CHUNK], r[s:s + CHUNK]
        keep = torch.isfinite(rc) & (torch.isfinite(rc.to(oc.dtype)) if rc.dtype != oc.dtype else True)
        wide = torch.complex128 if oc.is_complex() or rc.is_complex() else torch.float64
        oc, rc = oc[keep].to(wide), rc[keep].to(wide)
        if oc.numel() == 0:
            continue
        ratio = (oc - rc).abs() / (atol + rtol * rc.abs())
        if not bool(torch.isfinite(ratio).all()):
            return float("inf")
        worst = max(worst, float(ratio.max()))
    return worst


def has_nan(t: torch.Tensor) -> bool:
    """Any NaN among a floating tensor's elements (chunk by chunk)."""
    if not (t.is_floating_point() or t.is_complex()):
        return False
    f = _flat(t.detach())
    return any(bool(torch.isnan(f[s:s + CHUNK]).any()) for s in range(0, f.numel(), CHUNK))


def is_constant(t: torch.Tensor) -> bool:
    """Every element equal to the first (chunk by chunk)."""
    f = _flat(t.detach())
    first = f[0]
    return all(bool((f[s:s + CHUNK] == first).all()) for s in range(0, f.numel(), CHUNK))


def rms(t: torch.Tensor) -> float:
    """Root mean square of a tensor's finite elements (of their moduli, if complex), in float64, a chunk at a time
    (tensors of many GiB)."""
    flat = _flat(t.detach())
    total, n = 0.0, 0
    for s in range(0, flat.numel(), CHUNK):
        c = flat[s:s + CHUNK]
        c = (c.abs() if c.is_complex() else c).to(torch.float64)
        finite = torch.isfinite(c)
        total += float(torch.where(finite, c, torch.zeros_like(c)).pow(2).sum())
        n += int(finite.sum())
    return math.sqrt(total / n) if n else 0.0


def spread(t: torch.Tensor) -> float:
    """Root mean square of a real tensor's finite elements about their mean (`rms` for a complex one): how far its
    values lie from a common level, which rounding relative to each value does not cover."""
    flat = _flat(t.detach())
    if flat.is_complex():
        return rms(t)
    total, square, n = 0.0, 0.0, 0
    for s in range(0, flat.numel(), CHUNK):
        c = flat[s:s + CHUNK].to(torch.float64)
        c = torch.where(torch.isfinite(c), c, torch.nan)
        total += float(c.nansum())
        square += float(c.pow(2).nansum())
        n += int((~torch.isnan(c)).sum())
    return math.sqrt(max(0.0, square / n - (total / n) ** 2)) if n else 0.0


#: How many elements of an output `local_spread` reads (a corner of it, whole along the axis it differences).
LOCAL_SAMPLE = 1 << 22


def local_spread(t: torch.Tensor) -> float:
    """How far an output's values lie from their neighbours': the root mean square of its differences along the axis
    where they are smallest (an axis whose elements are all equal, a broadcast one, aside), over sqrt 2 (two
    independent values differ by sqrt 2 of their spread), and at most `spread`. An output whose values climb along
    an axis (a cumsum of positive terms, 0.5 to 2048 along a row) has a spread of hundreds that no element's
    rounding carries: its terms are its steps. As an absolute tolerance that spread let a scan leaving out one
    term pass at bf16; elements that are independent (a matrix product's, a norm's) differ by their spread, and
    keep it. Read on a corner of the output of at most `LOCAL_SAMPLE` elements."""
    x, whole = t.detach(), spread(t)
    if x.is_complex() or x.dim() == 0 or x.numel() < 2:
        return whole
    best = None
    for d in range(x.dim()):
        n = min(x.shape[d], LOCAL_SAMPLE)
        if n < 2:
            continue
        other = max(1, LOCAL_SAMPLE // n)
        corner = x[tuple(slice(0, n) if i == d else slice(0, other) for i in range(x.dim()))]
        while corner.numel() > LOCAL_SAMPLE and any(corner.shape[i] > 1 for i in range(x.dim()) if i != d):
            i = max((i for i in range(x.dim()) if i != d), key=lambda i: corner.shape[i])
            corner = corner.narrow(i, 0, max(1, corner.shape[i] // 2))
        c = corner.to(torch.float64)
        step = c.narrow(d, 1, n - 1) - c.narrow(d, 0, n - 1)
        step = step[torch.isfinite(step)]
        if step.numel() == 0:
            continue
        r = float(step.square().mean().sqrt())
        if r > 0 and (best is None or r < best):
            best = r
    return whole if best is None else min(whole, best / math.sqrt(2))


def unresolved(native_rms_err: float, truth_rms: float) -> bool:
    """Whether the model's own result in a reduced precision is no closer to the float32 truth than the truth's own
    size (its RMS error at least the truth's RMS): the precision, as PyTorch computes in it, resolves nothing of the
    value. A GroupNorm's mean, a bias's gradient ahead of a BatchNorm: zero but for rounding, the truth's float32
    rounding and the precision's noise; an exact answer differs from the truth by all of the truth's size. A truth
    of exact zeros that PyTorch's own result misses (an input's gradient through a clamp, ties at bf16) is one too."""
    return native_rms_err > 0.0 and native_rms_err >= truth_rms


def check_degenerate(out: torch.Tensor, ref: torch.Tensor, index: int = 0,
                     native: torch.Tensor | None = None) -> None:
    """A constant (e.g. all-zero) output where the reference varies is not a computation. Where the model's own
    result in the precision (``native``) is constant too, the precision's rounding made it so, and where that
    result resolves nothing of the truth (`unresolved`) the truth's variation is rounding: no finding then."""
    if out.numel() < 2 or not out.is_floating_point():
        return
    if is_constant(out) and not is_constant(ref) and not (native is not None and (
            is_constant(native) or unresolved(error_stats(native, ref)[1], rms(ref)))):
        value = float(_flat(out)[0])
        raise Mismatch("numerical", f"output {index} is constant ({value:.6g}) while the reference varies; "
                                    "within tolerance or not, that is not the computation",
                       {"output": index, "degenerate": True, "constant": value})


def _where(o: torch.Tensor, r: torch.Tensor, pos: int, index: int, n: int) -> dict[str, Any]:
    coord = []
    rem = pos
    for dim in reversed(o.shape):
        coord.append(rem % dim)
        rem //= dim
    return {"output": index, "mismatched": n, "mismatched_fraction": n / max(o.numel(), 1),
            "index": list(reversed(coord)), "expected": float(_flat(r)[pos]), "got": float(_flat(o)[pos])}
