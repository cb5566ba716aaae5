"""An experiment's problem runs, read from MLflow into one pandas row each, and what their timings say.

`load_runs` reads them (any status), `dedupe` keeps the newest finished run per configuration and problem, and
`kernel_timings` gathers every timing of each kernel across runs, which `timing_noise` and `timings_frame`
summarise: how far timing noise alone moved one kernel's speedup in this experiment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..metrics import SPEEDUP_FIELD
from ..tracking.schema import CONFIG_TAGS, Kind, Metrics, Tags, metric, metric_history, speedup_metric, tag_is

#: Where a timing of one kernel can be compared with another timing of it (at bf16 it is another program's time).
TIMING_KEYS = ("backend", "device", "size", "precision", "problem")
#: The precision of a run logged before runs were tagged with theirs: every job verified at fp32 then.
UNTAGGED_PRECISION = "fp32"


def with_precision(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``precision`` in every row (`UNTAGGED_PRECISION` where a run has none), so that runs at fp32
    and at bf16 are never pooled, and an untagged run is fp32's."""
    if df.empty:
        return df
    tagged = df["precision"] if "precision" in df else pd.Series("", index=df.index)
    return df.assign(precision=tagged.fillna("").replace("", UNTAGGED_PRECISION))


def _history(client, run_id: str, name: str) -> dict[int, float]:
    return {m.step: m.value for m in metric_history(client, run_id, name)}


def load_runs(client, experiment: str, baseline: str = "eager", iterations: bool = True) -> pd.DataFrame:
    """Problem runs of one experiment (any status), one row each; empty when the experiment does not exist.

    With ``iterations``, column ``steps`` holds each run's iterations as (step, correct, speedup over the
    baseline, kernel hash) in step order.
    """
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return pd.DataFrame()
    rows = []
    for r in client.search_runs([exp.experiment_id], tag_is(Tags.KIND, Kind.PROBLEM), max_results=50000):
        t, m = r.data.tags, r.data.metrics
        row = {k: t.get(k, "") for k in CONFIG_TAGS}
        row.update(run_id=r.info.run_id, status=r.info.status, start_time=r.info.start_time,
                   problem=t.get(Tags.PROBLEM, ""), level=t.get(Tags.LEVEL, ""), parent=t.get(Tags.PARENT, ""),
                   device=t.get(Tags.DEVICE, ""), model_label=t.get(Tags.MODEL_LABEL, ""),
                   best_kernel=t.get(Tags.BEST_KERNEL, ""), correct=bool(m.get(Metrics.BEST_CORRECT, 0.0)),
                   **{field: metric(m, Metrics.best_speedup(b)) for b, field in SPEEDUP_FIELD.items()},
                   iterations=m.get(Metrics.ITERATIONS), cost_usd=m.get(Metrics.TOTAL_COST_USD),
                   kernel_share=m.get(Metrics.BEST_KERNEL_SHARE),
                   speed_lo=metric(m, Metrics.best_speedup_lo(baseline)), speed_hi=metric(m, Metrics.best_speedup_hi(baseline)),
                   degenerate="degenerate" in t.get(Tags.PROBLEM_FLAGS, "").split(","),
                   degenerate_kb="degenerate_kernelbench" in t.get(Tags.PROBLEM_FLAGS, "").split(","))
        speed = _history(client, r.info.run_id, speedup_metric(baseline))
        row.update(_kernelbench_best(_history(client, r.info.run_id, Metrics.CORRECT_KERNELBENCH), speed))
        if iterations:
            correct = _history(client, r.info.run_id, Metrics.CORRECT)
            row["steps"] = [(s, bool(correct[s]), speed.get(s), t.get(Tags.kernel_at(s), "")) for s in sorted(correct)]
        rows.append(row)
    return with_precision(pd.DataFrame(rows))


def _kernelbench_best(correct: dict[int, float], speed: dict[int, float]) -> dict[str, Any]:
    """A problem's outcome under KernelBench's rules: solved once any iteration was, at that iteration's best
    speedup (runs logged before the rule sets have no such metric: None)."""
    if not correct:
        return {"correct_kb": None, "speed_kb": None}
    ok = [s for s, v in correct.items() if v]
    return {"correct_kb": bool(ok), "speed_kb": max((speed[s] for s in ok if speed.get(s)), default=None)}


def dedupe(df: pd.DataFrame) -> pd.DataFrame:
    """The newest FINISHED run per configuration and problem."""
    if df.empty:
        return df
    done = df[df["status"] == "FINISHED"]
    keys = [c for c in (*CONFIG_TAGS, "problem") if c in done.columns]
    return done.sort_values("start_time").groupby(keys, dropna=False, as_index=False).tail(1).reset_index(drop=True)


def kernel_timings(runs: pd.DataFrame) -> dict[tuple, list[float]]:
    """Every recorded speedup of each kernel (correct iterations with a kernel hash), any run's."""
    out: dict[tuple, list[float]] = {}
    for _, row in with_precision(runs).iterrows():
        seen = set()  # a kernel met again in a run repeats its one timing (kforge.loop.finalists): counted once
        for _, ok, speed, kernel in row.get("steps") or []:
            if ok and kernel and speed and (kernel, speed) not in seen:
                seen.add((kernel, speed))
                out.setdefault((*(row[k] for k in TIMING_KEYS), kernel), []).append(speed)
    return out


@dataclass(frozen=True)
class TimingNoise:
    """How much the timings of one kernel varied, over the kernels timed more than once."""

    kernels: int
    """Kernels timed more than once."""
    median: float | None
    """Median over those kernels of (fastest / slowest timing - 1)."""
    worst: float | None
    """The largest such spread."""


def timing_noise(timings: dict[tuple, list[float]]) -> TimingNoise:
    spreads = [max(v) / min(v) - 1 for v in timings.values() if len(v) > 1 and min(v) > 0]
    if not spreads:
        return TimingNoise(0, None, None)
    return TimingNoise(len(spreads), float(np.median(spreads)), max(spreads))


def timings_frame(timings: dict[tuple, list[float]]) -> pd.DataFrame:
    """One row per kernel timed more than once: its timings' count, range and spread."""
    rows = [dict(zip((*TIMING_KEYS, "kernel"), key), timings=len(v), min=min(v), median=float(np.median(v)),
                 max=max(v), spread=max(v) / min(v) - 1) for key, v in timings.items() if len(v) > 1]
    return pd.DataFrame(rows, columns=[*TIMING_KEYS, "kernel", "timings", "min", "median", "max", "spread"])
