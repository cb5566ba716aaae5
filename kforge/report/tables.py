"""The paper's ablation tables, from MLflow runs, with pandas.

One row per (model, backend, precision, level, factor), plus an ``all`` level per arm (`arm_keys`) over several;
runs at another precision are another arm, never pooled (the precision ablation's factor is the precision). Its
columns are `COLUMNS`, the one list to extend: problems n, correctness rate, fast_1 and fast_1.5 (k/n with a
bootstrap interval over problems), the kernel share, the problems the audit flags degenerate, the geomean
speedup of correct kernels, the problems whose speedup is within noise, and the geomean's timing range (the
geomean had every best kernel taken its slowest or fastest timing of its source in the experiment: how far
timing noise alone moves it). `render` writes Markdown, CSV and LaTeX; `plots` draws the figures.

Runs are deduplicated: for one configuration and problem only the newest finished run counts, so a
resumed or repeated sweep never counts a problem twice (its older runs' timings still feed the range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..metrics import SPEEDUP_FIELD, geomean
from .runs import TIMING_KEYS, with_precision

#: Ablation name -> (MLflow experiment, the tag that holds its factor).
ABLATIONS: dict[str, tuple[str, str]] = {
    "single_vs_iterative": ("kforge-single_vs_iterative", "loop_mode"),
    "reference_transfer": ("kforge-reference_transfer", "reference"),
    "profiling_ablation": ("kforge-profiling_ablation", "analysis"),
    "iterative_vs_beam": ("kforge-iterative_vs_beam", "loop_mode"),
    "backward_ablation": ("kforge-backward_ablation", "pass"),
    "precision_ablation": ("kforge-precision_ablation", "precision"),
}
#: What the models that are not LLMs are (their rows are marked, and the caption says so).
NOT_LLMS = {"oracle": "kforge's hand-written solutions", "scripted": "replies fixed in advance"}


@dataclass(frozen=True)
class Context:
    """What every cell of one table is computed with."""

    baseline: str = "eager"
    """The speedup the table reports: over PyTorch ``eager`` or ``compile``."""
    timings: dict[tuple, list[float]] = field(default_factory=dict)
    """(backend, device, size, problem, kernel hash) -> every speedup recorded for that kernel."""
    resamples: int = 2000
    """Bootstrap resamples over problems."""
    confidence: float = 0.95
    """Coverage of the bootstrap interval."""
    seed: int = 0
    """Seed of the resampling (the same runs give the same table)."""
    include_degenerate: bool = False
    """Count problems the audit flags ``degenerate`` (a constant output passes) in fast_p and the geomean."""


@dataclass(frozen=True)
class Estimate:
    """A rate (k of n) or a geomean, with its bootstrap interval over problems."""

    value: float | None
    lo: float | None
    hi: float | None
    n: int
    k: int | None = None
    """Problems counted, for a rate."""

    def parts(self) -> tuple[str, str]:
        """The value, and its interval."""
        if self.value is None:
            return "-", ""
        head = f"{self.k}/{self.n}" if self.k is not None else f"{self.value:.2f}"
        return head, f"[{self.lo:.2f}, {self.hi:.2f}]"

    def text(self) -> str:
        return " ".join(p for p in self.parts() if p)

    def flat(self, key: str) -> dict[str, Any]:
        out = {key: self.value, f"{key}_lo": self.lo, f"{key}_hi": self.hi}
        return {f"{key}_k": self.k, **out} if self.k is not None else out


@dataclass(frozen=True)
class TimingRange:
    """The geomean under the slowest and the fastest recorded timing of each best kernel."""

    lo: float | None
    hi: float | None
    retimed: int
    """Problems whose best kernel was timed more than once."""
    n: int
    """Problems with a correct kernel."""

    def parts(self) -> tuple[str, str]:
        """The range, and how many problems' best kernels were timed more than once."""
        if self.lo is None:
            return "-", ""
        return f"{self.lo:.2f}–{self.hi:.2f}", f"({self.retimed}/{self.n})"

    def text(self) -> str:
        return " ".join(p for p in self.parts() if p)

    def flat(self, key: str) -> dict[str, Any]:
        return {f"{key}_lo": self.lo, f"{key}_hi": self.hi, f"{key}_retimed": self.retimed}


@dataclass(frozen=True)
class Column:
    """One column of the ablation tables."""

    key: str
    """Its name in code and in the CSV."""
    header: str
    """Its heading in Markdown and LaTeX."""
    value: Callable[[pd.DataFrame, Context], Any]
    """Its value for one cell's runs (one row per problem)."""
    caption: str
    """What the caption says it is (``{baseline}`` and ``{confidence}`` are filled in)."""


def _fair(group: pd.DataFrame, ctx: Context, rules: str = "kforge") -> pd.DataFrame:
    """The problems a speedup means something on: not those whose tolerance a constant output passes under ``rules``
    (``degenerate``; for KernelBench's also ``degenerate_kb``, a constant passing its comparison alone)."""
    if ctx.include_degenerate:
        return group
    drop = np.zeros(len(group), dtype=bool)
    for flag in ("degenerate", "degenerate_kb")[:2 if rules == "kernelbench" else 1]:
        if flag in group:
            drop |= group[flag].fillna(False).astype(bool).to_numpy()
    return group[~drop]


#: Each rule set's columns of a runs frame (`load_runs`): whether a problem is solved, and its best speedup
#: (None: the kforge column of the context's baseline). ``kernelbench``'s come from the per-iteration metric
#: `kforge.verify.verdict.correct_under` wrote; runs logged before rule sets have none, and count unsolved.
RULE_COLUMNS: dict[str, tuple[str, str | None]] = {"kforge": ("correct", None),
                                                   "kernelbench": ("correct_kb", "speed_kb")}


def solved(group: pd.DataFrame, rules: str = "kforge") -> np.ndarray:
    """Whether each problem is correct under rule set ``rules`` (`RULE_COLUMNS`)."""
    column = group.get(RULE_COLUMNS[rules][0], pd.Series(False, index=group.index))
    return column.fillna(False).to_numpy(dtype=bool)


def _speed(group: pd.DataFrame, ctx: Context, rules: str = "kforge") -> np.ndarray:
    """Each problem's best speedup over the baseline, NaN where it has no correct, timed kernel under ``rules``."""
    column = RULE_COLUMNS[rules][1] or SPEEDUP_FIELD[ctx.baseline]
    s = pd.to_numeric(group.get(column, pd.Series(np.nan, index=group.index)), errors="coerce").to_numpy(dtype=float)
    return np.where(solved(group, rules) & (s > 0), s, np.nan)


def _interval(stats: np.ndarray, ctx: Context) -> tuple[float | None, float | None]:
    stats = stats[~np.isnan(stats)]
    if not len(stats):
        return None, None
    tail = (1 - ctx.confidence) / 2
    lo, hi = np.quantile(stats, [tail, 1 - tail])
    return float(lo), float(hi)


def _resample(n: int, ctx: Context) -> np.ndarray:
    return np.random.default_rng(ctx.seed).integers(0, n, size=(ctx.resamples, n))


def rate(counted: Callable[[pd.DataFrame, Context], np.ndarray]) -> Callable[[pd.DataFrame, Context], Estimate]:
    """A column's value: the share of problems ``counted`` marks, with its bootstrap interval."""
    def value(group: pd.DataFrame, ctx: Context) -> Estimate:
        x = np.asarray(counted(group, ctx), dtype=float)
        if not len(x):
            return Estimate(None, None, None, 0, 0)
        return Estimate(float(x.mean()), *_interval(x[_resample(len(x), ctx)].mean(axis=1), ctx), len(x),
                        int(x.sum()))
    return value


def faster(p: float, rules: str = "kforge") -> Callable[[pd.DataFrame, Context], np.ndarray]:
    """Correct under ``rules`` and more than ``p`` times faster than the baseline (KernelBench's fast_p), over
    the problems that are not degenerate."""
    return lambda group, ctx: np.nan_to_num(_speed(_fair(group, ctx, rules), ctx, rules), nan=0.0) > p


def kernel_share(group: pd.DataFrame, ctx: Context) -> Estimate:
    """The mean share of the best correct kernels' device time spent in their own kernels (not PyTorch's or a
    library's), with its bootstrap interval."""
    fair = _fair(group, ctx)
    x = pd.to_numeric(fair.get("kernel_share", pd.Series(dtype=float)), errors="coerce").to_numpy(dtype=float)
    x = x[solved(fair) & ~np.isnan(x)] if len(x) else x
    if not len(x):
        return Estimate(None, None, None, 0)
    return Estimate(float(x.mean()), *_interval(x[_resample(len(x), ctx)].mean(axis=1), ctx), len(x))


def geomean_speedup(group: pd.DataFrame, ctx: Context) -> Estimate:
    logs = np.log(_speed(_fair(group, ctx), ctx))
    if np.isnan(logs).all():
        return Estimate(None, None, None, len(logs))
    resampled = logs[_resample(len(logs), ctx)]
    has = ~np.isnan(resampled).all(axis=1)  # a resample of incorrect problems only has no geomean
    sums, counts = np.nansum(resampled[has], axis=1), (~np.isnan(resampled[has])).sum(axis=1)
    lo, hi = _interval(np.exp(sums / counts), ctx)
    return Estimate(float(np.exp(np.nanmean(logs))), lo, hi, len(logs))


def timing_range(group: pd.DataFrame, ctx: Context) -> TimingRange:
    slow, fast, retimed = [], [], 0
    group = _fair(group, ctx)
    for (_, row), s in zip(group.iterrows(), _speed(group, ctx)):
        if math.isnan(s):
            continue
        seen = ctx.timings.get((*(row[k] for k in TIMING_KEYS), row["best_kernel"]), []) if row["best_kernel"] else []
        retimed += len(seen) > 1
        slow.append(min([s, *seen]))
        fast.append(max([s, *seen]))
    return TimingRange(geomean(slow), geomean(fast), retimed, len(slow))


def within_noise(group: pd.DataFrame, ctx: Context) -> int | str:
    """Problems whose best kernel's speedup interval spans 1.0 (`kforge.verify.retime`); ``-``: none logged."""
    fair = _fair(group, ctx)
    if "speed_lo" not in fair or fair["speed_lo"].isna().all():
        return "-"
    lo, hi = (pd.to_numeric(fair[c], errors="coerce").to_numpy(dtype=float) for c in ("speed_lo", "speed_hi"))
    return int((~np.isnan(_speed(fair, ctx)) & (lo <= 1.0) & (hi >= 1.0)).sum())


#: The table's columns, in order. A new column is one entry here (and its caption sentence).
COLUMNS: list[Column] = [
    Column("n", "n", lambda g, ctx: len(g), "n: problems (the newest finished run of each)."),
    Column("correct", "correct", rate(lambda g, ctx: solved(g)),
           "correct, fast_1, fast_1.5: k of n problems, then the {confidence} bootstrap interval of the rate "
           "over problems in brackets."),
    Column("fast_1", "fast_1", rate(faster(1.0)), "fast_p: correct and more than p times faster than {baseline}."),
    Column("fast_1.5", "fast_1.5", rate(faster(1.5)), ""),
    Column("correct_kb", "correct (KB rules)", rate(lambda g, ctx: solved(g, "kernelbench")),
           "correct and fast_1 (KB rules): the same under KernelBench's rules, where matching outputs suffice and a "
           "program whose own kernels did not do the work counts too, so they compare with its leaderboard; their "
           "fast_p also leaves out the problems where a constant output passes KernelBench's comparison alone (the "
           "audit's degenerate_kernelbench: a bf16 softmax)."),
    Column("fast_1_kb", "fast_1 (KB rules)", rate(faster(1.0, "kernelbench")), ""),
    Column("kernel_share", "kernel share", kernel_share,
           "kernel share: the mean share of the best correct kernels' device time spent in their own kernels rather "
           "than PyTorch's or a library's (cuBLAS, cuDNN), with its {confidence} bootstrap interval."),
    Column("degenerate", "degenerate", lambda g, ctx: int(g["degenerate"].sum()) if "degenerate" in g else 0,
           "degenerate: problems the audit flags so (a constant output passes their tolerance); fast_p, the geomean, "
           "its timing range and the kernel share leave them out, correct counts them."),
    Column("geomean_speedup", "geomean speedup", geomean_speedup,
           "geomean speedup: over correct kernels, with its {confidence} bootstrap interval over problems."),
    Column("within_noise", "within noise", within_noise,
           "within noise: problems whose best kernel's speedup interval spans 1, not known to be faster or slower."),
    Column("timing_range", "timing range", timing_range,
           "timing range: the geomean if every best kernel took its slowest or its fastest recorded timing of the "
           "same source in this experiment (other iterations, arms, reruns), then how many of the problems with a "
           "correct kernel had it timed more than once; geomeans inside this range differ by timing noise alone."),
]


def arm_keys(factor: str) -> list[str]:
    """What keeps one arm's runs apart from another's: the model, the backend, the precision (a bf16 kernel's
    correctness and speed are not fp32's), then the factor (the precision itself in the precision ablation)."""
    return [*(k for k in ("model", "backend", "precision") if k != factor), factor]


def summarise(group: pd.DataFrame, ctx: Context) -> dict[str, Any]:
    return {c.key: c.value(group, ctx) for c in COLUMNS}


def ablation_table(df: pd.DataFrame, factor: str, ctx: Context | None = None) -> pd.DataFrame:
    """Rows by model x backend x precision x level x factor, plus an ``all`` level row per arm (`arm_keys`) that
    spans several levels (with one level, that row would repeat the level's).

    Each `COLUMNS` entry is a column of values (`Estimate`, `TimingRange`, ...) with ``text()``.
    """
    ctx = ctx or Context()
    arm = arm_keys(factor)
    keys = [*arm[:-1], "level", factor]
    if df.empty:
        return pd.DataFrame(columns=[*keys, *(c.key for c in COLUMNS)])
    df = with_precision(df)
    rows = []
    for values, group in df.groupby(keys, dropna=False):
        rows.append(dict(zip(keys, values), **summarise(group, ctx)))
    for values, group in df.groupby(arm, dropna=False):
        if group["level"].nunique(dropna=False) > 1:
            rows.append(dict(zip(arm, values), level="all", **summarise(group, ctx)))
    out = pd.DataFrame(rows)
    out["level"] = out["level"].astype(str)
    return out.sort_values(keys, key=lambda s: s.map(str)).reset_index(drop=True)


def fast_p_curve(df: pd.DataFrame, factor: str, ps=None, baseline: str = "eager") -> pd.DataFrame:
    """fast_p for p in [0, 3] per arm (`arm_keys`), with its n."""
    ps = ps if ps is not None else [round(0.1 * i, 2) for i in range(31)]
    ctx = Context(baseline)
    arm = arm_keys(factor)
    rows = []
    for keys, group in with_precision(df).groupby(arm, dropna=False):
        group = _fair(group, ctx)
        speed, n = np.nan_to_num(_speed(group, ctx), nan=0.0), len(group)
        for p in ps:
            # fast_0 is the correctness rate (an untimed correct kernel counts there only)
            k = int(solved(group).sum()) if p == 0 else int((speed > p).sum())
            rows.append({**dict(zip(arm, keys)), "p": p, "fast_p": k / n if n else 0.0, "n": n})
    return pd.DataFrame(rows)


def by_iteration(df: pd.DataFrame, factor: str) -> pd.DataFrame:
    """Correctness rate and geomean best-so-far speedup after each iteration, per arm (`arm_keys`).

    ``iteration`` counts from 1. A problem that stopped early (its target reached) keeps its best
    through the configuration's last iteration, so n stays the number of problems.
    """
    keys = arm_keys(factor)
    agg = []
    for values, g in with_precision(df).groupby(keys, dropna=False):
        last = max((len(s) for s in g["steps"]), default=0)
        best_by_it: list[list[float | None]] = [[] for _ in range(last)]
        for steps in g["steps"]:
            best = None
            for i in range(last):
                if i < len(steps) and steps[i][1] and steps[i][2]:
                    best = max(best or 0.0, steps[i][2])
                best_by_it[i].append(best)
        for i, bests in enumerate(best_by_it):
            agg.append(dict(zip(keys, values), iteration=i + 1, n=len(bests),
                            correct_rate=sum(b is not None for b in bests) / len(bests), geomean_speedup=geomean(bests)))
    return pd.DataFrame(agg)


def not_llms(runs: pd.DataFrame) -> dict[str, str]:
    """The models among ``runs`` that are not LLMs, with what they are."""
    out = {}
    for model, label in runs[["model", "model_label"]].drop_duplicates().itertuples(index=False):
        if model in NOT_LLMS or "not an LLM" in (label or ""):
            out[model] = NOT_LLMS.get(model, label)
    return out
