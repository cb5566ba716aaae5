"""A kernel's speedup as noise leaves it: a figure with an interval, from one or several timings, and re-timing
already-verified kernels of one problem interleaved.

Picking the best of several noisy timings is a winner's curse: the same kernel, timed five times on a busy
machine, measured 0.14x to 5.98x, and the largest was kept. So a figure is the median of a kernel's timings
(`measured`), and its interval the range of those timings (timed once: that timing's ratio of medians
widened by two standard errors of itself, on the log scale, so it is s/k to s*k and never reaches 0); a speedup
whose interval spans 1.0 is not known to be faster or slower than the baseline. Where kernels compete, `retime` times them again in rounds, every kernel
once a round in turn, so that drift in the machine's load reaches each alike.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Callable

from .verdict import TimingStats, Verdict

#: Rounds `retime` times each kernel: the median of three survives one timing that noise threw far off.
ROUNDS = 3
#: Standard errors each timing's interval reaches to either side, on the log scale (about 95% for one timing).
WIDTH = 2.0


@dataclass(frozen=True)
class Speedup:
    """A kernel's speedup over one baseline, as measured."""

    value: float
    """The median of its timings' speedups."""
    lo: float
    hi: float
    """The interval: the range of its timings (timed once: that timing's own interval)."""
    timings: int
    """How many timings it comes from."""

    @property
    def spans_one(self) -> bool:
        """Not known to be faster or slower than the baseline: the interval holds 1.0."""
        return self.lo <= 1.0 <= self.hi

    def text(self) -> str:
        """``1.12x [0.95-1.31]``, with ``~`` where the interval spans 1.0."""
        return f"{self.value:.2f}x [{self.lo:.2f}-{self.hi:.2f}]" + (" ~" if self.spans_one else "")


def _rel(stats: TimingStats) -> float:
    """The relative standard error of a timing's median (from its spread where too few calls gave none)."""
    if stats.rel_err is not None and math.isfinite(stats.rel_err):
        return stats.rel_err
    if stats.n > 1 and stats.mean_ms > 0:
        return 1.2533 * stats.std_ms / stats.mean_ms / math.sqrt(stats.n)
    return 0.0


def one_timing(verdict: Verdict, baseline: str) -> Speedup | None:
    """One verification's speedup over ``baseline`` (``eager``, ``compile``) with its own interval; None untimed.

    A median's relative standard error is the standard error of its logarithm, so log(s) = log(base) - log(run)
    has their errors added in quadrature, and the interval is s·exp(±WIDTH·that): a ratio's interval is symmetric
    in log space. s·(1±e) was not: past e = 1 (a noisy timing) its lower end was clipped to 0, "0.00" in tables."""
    base = verdict.ref if baseline == "eager" else verdict.compile_ref
    run = verdict.runtime
    if run is None or base is None or run.median_ms <= 0 or base.median_ms <= 0:
        return None
    s = base.median_ms / run.median_ms
    k = math.exp(WIDTH * math.sqrt(_rel(run) ** 2 + _rel(base) ** 2))
    return Speedup(s, s / k, s * k, 1)


def measured(verdicts: list[Verdict], baseline: str) -> Speedup | None:
    """The speedup of one kernel over ``baseline`` from all its timings: their median, and as its interval the
    range of the timings' own figures, or, timed once, that timing's own interval (None: never timed)."""
    ones = [s for s in (one_timing(v, baseline) for v in verdicts) if s is not None]
    if len(ones) <= 1:
        return ones[0] if ones else None
    values = [s.value for s in ones]
    return Speedup(statistics.median(values), min(values), max(values), len(ones))


def timing_only(config, rounds: int = ROUNDS):
    """A `VerifyConfig` that times a kernel verified before: one correctness trial (a kernel that no longer
    computes the answer gives no timing), no attribution and no shape variants (the kernel was judged already),
    the time budget shared by the rounds."""
    return replace(config, trials=1, attribution=False, skip_timing=False, variants=False,
                   timing=replace(config.timing, budget_s=max(1.0, config.timing.budget_s / rounds)))


def retime(verify: Callable[[str], Verdict], sources: list[str], rounds: int = ROUNDS,
           stop: Callable[[], bool] = lambda: False) -> dict[str, list[Verdict]]:
    """Time each of ``sources`` (already-verified kernels of one problem) ``rounds`` more times, interleaved: a
    round times every kernel once, each round in another order, so drift in the machine reaches each alike.
    ``verify`` times one source (e.g. `Verifier.verify` with `timing_only` settings). The timings of each source
    (a round whose run failed gives none); ``stop`` ends it early (Ctrl-C)."""
    out: dict[str, list[Verdict]] = {s: [] for s in sources}
    for r in range(rounds):
        for i in range(len(sources)):
            if stop():
                return out
            source = sources[(i + r) % len(sources)]
            verdict = verify(source)
            if verdict.runtime is not None:
                out[source].append(verdict)
    return out
