"""KernelBench's metrics over a set of problems: correctness rate, fast_p, geometric-mean speedup."""

from __future__ import annotations

import math
from typing import Iterable

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
#: What a speedup is measured against: PyTorch eager, or torch.compile of the reference.
BASELINES = ("eager", "compile")
#: The attribute (Verdict, IterationRecord, ProblemResult) or column (eval rows, the tables' frame) holding each.
SPEEDUP_FIELD = {"eager": "speedup_eager", "compile": "speedup_compile"}


def speedup_over(baseline: str, eager: float | None, compile: float | None, *,
                 or_eager: bool = False) -> float | None:
    """The speedup over ``baseline`` (``eager`` or ``compile``), None where it was not timed.

    ``or_eager``: eager's speedup where torch.compile's was not timed (``verify.compile_ref=false``), so a
    job that asks for compile still ranks its kernels and has a geomean; the loop's ranking and a job's
    summary metrics read speedups so, reports of one baseline (tables, eval summaries) do not.
    """
    if baseline not in BASELINES:
        raise ValueError(f"a speedup's baseline is one of {', '.join(BASELINES)}, not {baseline!r}")
    s = compile if baseline == "compile" else eager
    return eager if s is None and or_eager else s


def fast_p(outcomes: Iterable[tuple[bool, float | None]], p: float) -> float:
    """Fraction of problems that are correct AND faster than the baseline by more than ``p``.

    ``fast_0`` is the correctness rate (a correct kernel has a speedup > 0, or is counted when untimed).
    """
    items = list(outcomes)
    if not items:
        return 0.0
    ok = sum(1 for correct, s in items if correct and (p == 0 or (s is not None and s > p)))
    return ok / len(items)


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values (None when there are none)."""
    xs = [v for v in values if v is not None and v > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(v) for v in xs) / len(xs))


def summary(outcomes: list[tuple[bool, float | None]]) -> dict[str, float | None]:
    """Every metric for (correct, speedup) pairs, one pair per problem."""
    out: dict[str, float | None] = {f"fast_{p:g}": fast_p(outcomes, p) for p in FAST_P}
    out["correctness_rate"] = out["fast_0"]
    out["geomean_speedup"] = geomean(s for c, s in outcomes if c)
    out["n"] = len(outcomes)
    return out


def total_cost(costs: Iterable[float | None]) -> float | None:
    """What the calls cost together: the sum of the known prices, None when no price is known
    (a model litellm has no price for: empty in MLflow, not a misleading $0)."""
    known = [c for c in costs if c is not None]
    return sum(known) if known else None
