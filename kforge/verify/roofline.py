"""Speed of light for a correct candidate, and the faster-than-physics check.

Measured ceilings are what the hardware reaches; 20% under the floor is not a kernel, it is a trick,
unless the cached ceilings read low (measured while the device was shared): they are measured again
before anyone is accused. A problem without declared FLOPs/bytes gets them from its audit, for speed of
light; its check uses the one part no implementation can skip, writing the outputs, and a degenerate
problem gets none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ..precision import PRECISIONS, Precision
from ..problems import Problem
from ..sandbox.ceilings import CPU_FLOOR_MIN_BYTES, floor_ms
from .protocol import ProblemAudit

#: A candidate this far under the floor is accused (0.8: 20% under).
TOO_FAST = 0.8
#: bf16 products per fp32 product for fp32's tolerance on tensor cores: each operand split into bf16 hi + lo,
#: hi*hi + lo*hi + hi*lo. No fp32 kernel is accused of beating fp32 work at this share of the bf16 rate.
SPLIT_PRODUCTS = 3
_ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Roofline:
    floor_ms: float | None = None
    """The problem's floor on this device from its FLOPs and bytes (speed of light's denominator)."""
    too_fast: str | None = None
    """Why the candidate's median cannot be real (then the verdict is ``faster_than_roofline``)."""
    note: str | None = None


def _fastest(c: dict[str, Any] | None, precision: Precision) -> dict[str, Any] | None:
    """The ceilings a kernel at the precision might reach: fp32 work done on the tensor cores from split bf16
    operands (``SPLIT_PRODUCTS`` products each) can outrun the fp32 FMA peak that speed of light reports."""
    if not c or precision.peak != "fp32_flops" or not c.get("bf16_flops"):
        return c
    return {**c, "fp32_flops": max(c.get("fp32_flops") or 0.0, c["bf16_flops"] / SPLIT_PRODUCTS)}


def roofline(problem: Problem, audit: ProblemAudit | None, median_ms: float, device: str,
             ceilings: Callable[[bool], dict[str, Any] | None], precision: Precision = PRECISIONS["fp32"]) -> Roofline:
    """``ceilings(fresh)``: the device's measured ceilings (fresh: measured again now). The floor is the
    precision's: its FLOPs at its peak, its bytes at its element size (a file's declared bytes count float32
    elements; the audit's are measured on the cast tensors). The accusation allows fp32 work on the tensor
    cores (``_fastest``): a 3xBF16 GEMM is fp32-accurate and well above the fp32 FMA peak."""
    declared = bool(problem.flops or problem.bytes)
    if not declared and not (audit and audit.bytes):
        return Roofline()
    if declared and precision.reduced and problem.bytes:
        problem = replace(problem, bytes=problem.bytes * _ELEMENT_BYTES[precision.storage] / 4)
    measured = problem if declared else replace(problem, flops=audit.flops, bytes=audit.bytes)
    if device == "cpu" and (measured.bytes or 0) < CPU_FLOOR_MIN_BYTES:
        return Roofline()  # no floor is claimed on a CPU for data that fits its caches: do not measure
    bound = problem if declared else replace(problem, flops=None, bytes=audit.out_bytes)
    degenerate = audit is not None and "degenerate" in audit.flags

    def check(fresh: bool) -> tuple[float | None, float | None]:
        c = ceilings(fresh)
        return (floor_ms(measured, c, device, precision.peak),
                None if degenerate else floor_ms(bound, _fastest(c, precision), device, precision.peak))

    floor, limit = check(False)
    note = None if declared or not floor else ("speed of light from the audit's FLOPs (matrix products and "
                                                "convolutions) and bytes (inputs and parameters read once, outputs "
                                                "written once)")
    if not (limit and median_ms < TOO_FAST * limit):
        return Roofline(floor, None, note)
    floor, limit = check(True)
    if not (limit and median_ms < TOO_FAST * limit):
        return Roofline(floor, None, note)
    why = "its declared FLOPs and bytes" if declared else "writing its outputs once"
    return Roofline(floor, f"{median_ms:.4f} ms is faster than the problem's roofline floor allows on this device "
                           f"({limit:.4f} ms from {why})", note)
