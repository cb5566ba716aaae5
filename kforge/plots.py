"""The ablation plots: fast_p curves, and correctness and best speedup by iteration.

Axes do not exaggerate: rates run from 0 to 1, speedup axes start at 0 and include 1x (marked), and
iterations are whole numbers. Every panel has a legend, and every label gives its n (problems).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

BASELINES = {"eager": "PyTorch eager", "compile": "torch.compile"}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _label(keys, factor: str, n: int) -> str:
    return f"{keys[0]} · {keys[1]} · {factor}={keys[2]} (n={n})"


def plot_fast_p(curve: pd.DataFrame, factor: str, path: Path, title: str, baseline: str = "eager") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ns = set()
    for keys, g in curve.groupby(["model", "backend", factor], dropna=False):
        n = int(g["n"].iloc[0])
        ns.add(n)
        ax.plot(g["p"], g["fast_p"], drawstyle="steps-post", label=_label(keys, factor, n))  # a count: steps
    ax.set_xlabel(f"speedup threshold p (over {BASELINES[baseline]})")
    ax.set_ylabel("fast_p: share correct and > p times faster")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.axvline(1.0, color="0.6", lw=0.8, ls="--")
    n_text = f"n={ns.pop()} problems" if len(ns) == 1 else "n per curve in the legend"
    ax.set_title(f"{title}: fast_p ({n_text})", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_iterations(hist: pd.DataFrame, factor: str, path: Path, title: str, baseline: str = "eager") -> Path:
    from matplotlib.ticker import MaxNLocator
    plt = _pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    top = 1.0
    for keys, g in hist.groupby(["model", "backend", factor], dropna=False):
        g = g.sort_values("iteration")
        label = _label(keys, factor, int(g["n"].iloc[0]))
        a1.plot(g["iteration"], g["correct_rate"], marker="o", label=label)
        a2.plot(g["iteration"], g["geomean_speedup"], marker="o", label=label)
        top = max(top, float(g["geomean_speedup"].max(skipna=True) or 0.0))
    for ax in (a1, a2):
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(0.5, max(1, int(hist["iteration"].max())) + 0.5)
        ax.legend(fontsize=7, loc="lower right")
    a1.set_ylabel("share of problems correct so far")
    a1.set_ylim(0, 1.02)
    a1.set_title(f"{title}: correctness", fontsize=10)
    a2.set_ylabel(f"geomean best speedup over {BASELINES[baseline]}\n(correct kernels so far)")
    a2.set_ylim(0, top * 1.15)
    a2.axhline(1.0, color="0.6", lw=0.8, ls="--")
    a2.set_title(f"{title}: speedup (1x = as fast as {BASELINES[baseline]})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
