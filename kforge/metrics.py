"""KernelBench's metrics over a set of problems: correctness rate, fast_p, geometric-mean speedup."""

from __future__ import annotations

import math
from typing import Iterable

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


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
