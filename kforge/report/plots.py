"""The ablation plots: fast_p curves, and correctness and best speedup by iteration.

Axes do not exaggerate: rates run from 0 to 1, speedup axes start at 0 and include 1x (marked), and
iterations are whole numbers. Every panel has a legend in a reader's words (``Single shot``, not
``loop_mode=single_shot``), and every label gives its n (problems). Where the tables carry a timing range,
the speedup plot draws it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..figure import BASELINE_NAMES, integer_ticks, pyplot
from .runs import with_precision
from .tables import arm_keys

#: What a factor is called in a heading or an axis.
FACTOR_NAMES = {"loop_mode": "Loop", "reference": "Reference", "analysis": "Analysis", "profiler": "Profiler",
                "model": "Model", "backend": "Backend", "level": "Level", "pass": "Pass",
                "precision": "Precision"}
#: What a factor's values are called in a table or legend (others: their words, capitalised).
VALUE_NAMES = {("loop_mode", "single_shot"): "Single shot", ("loop_mode", "iterative"): "Iterative",
               ("loop_mode", "beam"): "Beam search", ("reference", "none"): "No reference",
               ("analysis", "off"): "No analysis", ("analysis", "rules"): "Rule-based analysis",
               ("analysis", "llm"): "LLM analysis", ("profiler", "none"): "No profiler",
               ("pass", "forward"): "Forward only", ("pass", "training"): "Training step",
               **{("precision", p): p.upper() for p in ("fp32", "tf32", "bf16", "fp16")}}
#: A reference's kind (``oracle:cpu`` is the oracle's kernels for the cpu backend).
REFERENCE_KINDS = {"oracle": "Oracle kernels", "mlflow": "Earlier runs' kernels"}


def factor_name(factor: str) -> str:
    return FACTOR_NAMES.get(factor, factor.replace("_", " ").capitalize())


def value_name(factor: str, value) -> str:
    """``single_shot`` of ``loop_mode`` -> ``Single shot``: a value as a reader of the paper names it."""
    text = str(value)
    if (factor, text) in VALUE_NAMES:
        return VALUE_NAMES[(factor, text)]
    if factor == "reference" and ":" in text:
        kind, backend = text.split(":", 1)
        return f"{REFERENCE_KINDS.get(kind, kind.capitalize())} ({backend})"
    return text[:1].upper() + text[1:].replace("_", " ") if factor in FACTOR_NAMES and factor != "model" else text


def _arms(frame: pd.DataFrame, factor: str) -> tuple[list, bool]:
    """The arms (`arm_keys`) of a plot's frame, and whether their precisions differ (then each legend says its own)."""
    frame = with_precision(frame)
    return list(frame.groupby(arm_keys(factor), dropna=False)), frame["precision"].nunique() > 1


def _label(keys, factor: str, n: int, precisions: bool, bound: str = "=") -> str:
    """An arm (its `arm_keys` values) in a legend: ``Single shot · oracle · cpu (n=6)``, ``· BF16`` after the
    backend where the plot holds several precisions."""
    arm = dict(zip(arm_keys(factor), keys))
    said = [value_name(factor, arm[factor]), str(arm["model"]), str(arm["backend"])]
    if precisions and factor != "precision":
        said.append(value_name("precision", arm["precision"]))
    return f"{' · '.join(said)} (n{bound}{n})"


def title_of(name: str) -> str:
    """``single_vs_iterative`` -> ``Single vs iterative``."""
    return name[:1].upper() + name[1:].replace("_", " ")


def plot_fast_p(curve: pd.DataFrame, factor: str, path: Path, title: str, baseline: str = "eager") -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ns = set()
    arms, precisions = _arms(curve, factor)
    for keys, g in arms:
        n = int(g["n"].iloc[0])
        ns.add(n)
        ax.plot(g["p"], g["fast_p"], drawstyle="steps-post", label=_label(keys, factor, n, precisions))  # a count: steps
    ax.set_xlabel(f"speedup threshold p (over {BASELINE_NAMES[baseline]})")
    ax.set_ylabel("fast_p: share correct and > p times faster")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.axvline(1.0, color="0.6", lw=0.8, ls="--")
    n_text = f"n={ns.pop()} problems" if len(ns) == 1 else "n per curve in the legend"
    ax.set_title(f"{title_of(title)}: fast_p ({n_text})", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_iterations(hist: pd.DataFrame, factor: str, path: Path, title: str, baseline: str = "eager") -> Path:
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    top = 1.0
    arms, precisions = _arms(hist, factor)
    for keys, g in arms:
        g = g.sort_values("iteration")
        label = _label(keys, factor, int(g["n"].iloc[0]), precisions)
        a1.plot(g["iteration"], g["correct_rate"], marker="o", label=label)
        a2.plot(g["iteration"], g["geomean_speedup"], marker="o", label=label)
        top = max(top, float(g["geomean_speedup"].max(skipna=True) or 0.0))
    for ax in (a1, a2):
        ax.set_xlabel("iteration")
        integer_ticks(ax)
        ax.set_xlim(0.5, max(1, int(hist["iteration"].max())) + 0.5)
        ax.legend(fontsize=7, loc="lower right")
    a1.set_ylabel("share of problems correct so far")
    a1.set_ylim(0, 1.02)
    a1.set_title(f"{title_of(title)}: correctness", fontsize=10)
    a2.set_ylabel(f"geomean best speedup over {BASELINE_NAMES[baseline]}\n(correct kernels so far)")
    a2.set_ylim(0, top * 1.15)
    a2.axhline(1.0, color="0.6", lw=0.8, ls="--")
    a2.set_title(f"{title_of(title)}: speedup (1x = as fast as {BASELINE_NAMES[baseline]})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_speedups(points: pd.DataFrame, factor: str, path: Path, title: str, baseline: str = "eager") -> Path:
    """Each arm's geomean speedup per level, with its bootstrap interval (thin bar) and its timing range
    (the band: the geomean under each best kernel's slowest and fastest recorded timing, so arms whose
    bands overlap may differ by timing noise alone).

    ``points``: one row per table row with ``model``, ``backend``, ``precision``, ``level``, ``factor``, ``n``, ``geomean``,
    ``ci_lo``, ``ci_hi``, ``range_lo``, ``range_hi`` (None where there is none).
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    levels = sorted({str(v) for v in points["level"]}, key=lambda v: (v == "all", v))
    arms, precisions = _arms(points, factor)
    width = 0.7 / max(len(arms), 1)
    top = 1.0
    for i, (keys, g) in enumerate(arms):
        g = g[g["geomean"].notna()]
        x = [levels.index(str(v)) + (i - (len(arms) - 1) / 2) * width for v in g["level"]]
        colour = f"C{i % 10}"
        for xi, lo, hi in zip(x, g["range_lo"], g["range_hi"]):
            if pd.notna(lo) and pd.notna(hi):
                ax.add_patch(plt.Rectangle((xi - width * 0.35, lo), width * 0.7, max(hi - lo, 1e-9), color=colour,
                                           alpha=0.25, lw=0))
        err = [[v - lo if pd.notna(lo) else 0 for v, lo in zip(g["geomean"], g["ci_lo"])],
               [hi - v if pd.notna(hi) else 0 for v, hi in zip(g["geomean"], g["ci_hi"])]]
        n = int(g["n"].max()) if len(g) else 0
        ax.errorbar(x, g["geomean"], yerr=err, fmt="o", color=colour, lw=0.8, capsize=3,
                    label=_label(keys, factor, n, precisions, "≤"))
        top = max([top, *g["geomean"], *[v for v in (*g["ci_hi"], *g["range_hi"]) if pd.notna(v)]])
    ax.set_xticks(range(len(levels)), [f"level {v}" if v != "all" else "all levels" for v in levels])
    ax.set_ylim(0, top * 1.15)
    ax.axhline(1.0, color="0.6", lw=0.8, ls="--")
    ax.set_ylabel(f"geomean speedup over {BASELINE_NAMES[baseline]}\n(correct kernels)")
    ax.set_title(f"{title_of(title)}: speedup (bars: bootstrap interval; bands: timing range)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
