"""The precisions a workload can run in, and what each asks of a kernel (docs/verification.md, "Precision").

``fp32`` is the problem file as written. ``tf32`` keeps float32 storage and lets matrix products and
convolutions run on tensor cores in TF32. ``bf16`` and ``fp16`` cast every floating input and parameter to
that type, as KernelBench's ``precision=`` does, and expect outputs in it; kernels accumulate in fp32.

Under the ``kforge`` rules a reduced-precision kernel is judged against the truth: a float32 reference
computed from the same cast inputs and weights, TF32 off, with a tolerance derived from the precision's unit
roundoff *u* (and, at tf32, the problem's reduction length *K*: `tolerance`). Under the ``kernelbench`` rules it is
judged as KernelBench judges it: against the reference run in the precision itself with PyTorch's default
math settings, at KernelBench's tolerance (1e-4 for fp32, 1e-2 for fp16 and bf16).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str
    """``fp32``, ``tf32``, ``bf16`` or ``fp16``."""
    storage: str
    """The torch dtype inputs, parameters and outputs are held in (``float32``, ``bfloat16``, ``float16``)."""
    unit_roundoff: float
    """Half the spacing of the type's numbers just above 1: the relative error of one rounding."""
    peak: str
    """The measured ceiling (`kforge.sandbox.ceilings`) matrix work is held to in this precision."""
    kernelbench_tol: float
    """KernelBench's atol = rtol for the precision it runs (``get_tolerance_for_precision``)."""

    @property
    def reduced(self) -> bool:
        """Stored below float32: inputs and parameters are cast, and the kforge reference upcasts them."""
        return self.storage != "float32"

    @property
    def tensor_cores(self) -> bool:
        return self.name != "fp32"


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", "float32", 2.0 ** -24, "fp32_flops", 1e-4),
    "tf32": Precision("tf32", "float32", 2.0 ** -11, "tf32_flops", 1e-4),
    "bf16": Precision("bf16", "bfloat16", 2.0 ** -8, "bf16_flops", 1e-2),
    "fp16": Precision("fp16", "float16", 2.0 ** -11, "bf16_flops", 1e-2),
}
"""fp16's peak is bf16's: the tensor cores run both at one rate (fp8 is not offered: see docs/verification.md)."""

#: Roundings a kernel may add beyond the output's own: an intermediate or two stored in the precision.
ROUNDINGS = 4


def get_precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(f"unknown precision {name!r} (choose from {', '.join(PRECISIONS)})") from None


def reduction_length(flops: float | None, out_elements: int) -> int:
    """How many terms each output element sums, from one forward's FLOPs (two per multiply-add) and the
    outputs' size: 1 for elementwise work, the inner dimension for a matrix product."""
    if not flops or out_elements <= 0:
        return 1
    return max(1, round(flops / (2 * out_elements)))


def tolerance(p: Precision, k: int, spread: float) -> tuple[float, float]:
    """(atol, rtol) for ``|out - ref| <= atol + rtol * |ref|`` under the kforge rules, for a reduced precision.

    ``rtol = ROUNDINGS * u``: the output's rounding to the precision and up to three intermediates stored in
    it. ``atol = rtol * spread``: an element whose terms cancel to near zero carries the rounding errors of those
    terms, whose size is the output's spread (about its neighbours' values, which the verifier passes:
    `kforge.verify.compare.local_spread`; an output far from zero everywhere cancels nothing, and rtol covers it,
    nor does one whose values climb along an axis, a cumsum's). At tf32, whose operands are rounded inside each
    product and not before (the inputs stay float32, and so does the truth), a sum of K such products errs more
    the longer it is: ``atol`` grows by ``sqrt(1 + log2 K)``. At bf16 and fp16 the inputs and weights are already
    in the precision and the truth is computed from them: a kernel that accumulates in float32, as PyTorch does,
    errs by its output's rounding alone, and that factor let a block-scaled int8 GEMM pass at bf16. ``atol`` is at
    least the storage type's smallest subnormal (`SUBNORMAL`), the error of a correctly rounded output of a truth
    below it.
    """
    rtol = ROUNDINGS * p.unit_roundoff
    walk = 1.0 if p.reduced else math.sqrt(1.0 + math.log2(max(1, k)))
    return max(rtol * max(spread, 0.0) * walk, SUBNORMAL.get(p.storage, 0.0)), rtol


#: The smallest positive number of each reduced storage type: a truth below it rounds to zero or to it, so no kernel
#: can come closer (``x * 1e-9`` at fp16 was a mismatch for the correctly rounded zeros).
SUBNORMAL = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}
