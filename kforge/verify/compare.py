"""Output checks run in the worker: structure, values within tolerance, NaN/Inf, degenerate outputs."""

from __future__ import annotations

from typing import Any

import torch


class Mismatch(Exception):
    """An output check failed; ``kind`` is ``shape`` or ``numerical``; ``details`` go into the evidence."""

    def __init__(self, kind: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind, self.message, self.details = kind, message, details or {}


def as_outputs(out: Any) -> list[Any]:
    """A forward may return a tensor or a tuple/list of them."""
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def check_plain_tensor(x: Any, index: int) -> None:
    """Outputs must be real, materialised tensors: no subclasses, no lazy wrappers, no sparse layouts."""
    if type(x) is not torch.Tensor:
        kind = "shape" if not isinstance(x, torch.Tensor) else "cheat"
        raise Mismatch(kind, f"output {index} is a {type(x).__module__}.{type(x).__qualname__}, "
                             "not a plain torch.Tensor", {"output": index})
    if x.layout is not torch.strided:
        raise Mismatch("shape", f"output {index} has layout {x.layout}, expected strided", {"output": index})


def check_structure(outs: list[Any], refs: list[torch.Tensor], device: torch.device) -> None:
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
            raise Mismatch("shape", f"output {i} has dtype {o.dtype}, expected {r.dtype}",
                           {"output": i, "got_dtype": str(o.dtype), "expected_dtype": str(r.dtype)})
        if o.device.type != device.type:
            raise Mismatch("shape", f"output {i} is on {o.device}, expected {device.type}",
                           {"output": i, "got_device": str(o.device)})


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, index: int = 0) -> None:
    """Raise `Mismatch` unless every element is finite and within ``atol + rtol * |ref|``."""
    if out.numel() == 0:
        return
    if not (out.is_floating_point() or out.is_complex()):
        bad = out != ref
        if bool(bad.any()):
            n = int(bad.sum())
            pos = int(bad.flatten().nonzero()[0])
            raise Mismatch("numerical", f"output {index}: {n} of {out.numel()} integer elements differ",
                           _where(out, ref, pos, index, n))
        return
    o, r = out.detach(), ref.detach()
    finite = torch.isfinite(o)
    ref_finite = torch.isfinite(r)
    nonfinite = ~finite & ref_finite
    if bool(nonfinite.any()):
        n = int(nonfinite.sum())
        pos = int(nonfinite.flatten().nonzero()[0])
        raise Mismatch("numerical", f"output {index}: {n} NaN/Inf value(s) where the reference is finite "
                                    "(unwritten output elements read as NaN)", _where(o, r, pos, index, n))
    diff = (o.to(torch.float32) - r.to(torch.float32)).abs() if o.dtype in (torch.float16, torch.bfloat16) \
        else (o - r).abs()
    allowed = atol + rtol * r.abs().to(diff.dtype)
    # ``~(diff <= allowed)`` so that a NaN difference counts as bad.
    bad = ~(diff <= allowed) & ref_finite
    if bool(bad.any()):
        n = int(bad.sum())
        flat = torch.where(ref_finite, diff, torch.zeros_like(diff)).flatten()
        pos = int(torch.argmax(flat))
        details = _where(o, r, pos, index, n)
        rel = diff / r.abs().clamp_min(1e-12).to(diff.dtype)
        details.update(max_abs_err=float(flat[pos]),
                       max_rel_err=float(torch.where(ref_finite, rel, torch.zeros_like(rel)).max()),
                       atol=atol, rtol=rtol)
        raise Mismatch("numerical", f"output {index}: {n} of {o.numel()} elements outside atol={atol:g} "
                                    f"rtol={rtol:g} (max abs err {details['max_abs_err']:.3g})", details)


def check_degenerate(out: torch.Tensor, ref: torch.Tensor, index: int = 0) -> None:
    """A constant (e.g. all-zero) output where the reference varies is not a computation."""
    if out.numel() < 2 or not out.is_floating_point():
        return
    o, r = out.flatten(), ref.flatten()
    if bool((o == o[0]).all()) and not bool((r == r[0]).all()):
        raise Mismatch("numerical", f"output {index} is constant ({float(o[0]):.6g}) while the reference varies; "
                                    "within tolerance or not, that is not the computation",
                       {"output": index, "degenerate": True, "constant": float(o[0])})


def _where(o: torch.Tensor, r: torch.Tensor, pos: int, index: int, n: int) -> dict[str, Any]:
    coord = []
    rem = pos
    for dim in reversed(o.shape):
        coord.append(rem % dim)
        rem //= dim
    return {"output": index, "mismatched": n, "mismatched_fraction": n / max(o.numel(), 1),
            "index": list(reversed(coord)), "expected": float(r.flatten()[pos]), "got": float(o.flatten()[pos])}
