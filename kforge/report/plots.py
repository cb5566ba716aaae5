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


#: Marker colour per verification state in the search-tree plot (anything else: grey).
STATE_COLOURS = {"correct": "tab:green", "numerical_mismatch": "tab:orange", "shape_mismatch": "tab:brown",
                 "compilation_failure": "tab:red", "runtime_error": "tab:purple", "timeout": "tab:pink",
                 "cheat_detected": "black", "generation_failure": "tab:gray"}


def plot_tree(nodes: list[dict], path: Path, title: str, baseline: str = "eager") -> Path:
    """A beam search's tree: one point per node at its round (x) and speedup (y), a line to its parent,
    coloured by state; nodes that are not correct sit on the x axis (no speedup), the best is ringed.

    ``nodes``: dicts with ``id``, ``parent`` (None for a root), ``depth``, ``state``, ``speedup`` (None
    unless correct and timed), ``direction`` and ``best``.
    """
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator
    by_id = {n["id"]: n for n in nodes}
    # Siblings of one round spread sideways a little so they do not hide each other.
    per_depth: dict[int, list[dict]] = {}
    for n in sorted(nodes, key=lambda n: n["id"]):
        per_depth.setdefault(n["depth"], []).append(n)
    pos: dict[int, tuple[float, float]] = {}
    for depth, row in per_depth.items():
        for i, n in enumerate(row):
            offset = (i - (len(row) - 1) / 2) * min(0.6 / max(len(row), 1), 0.12)
            pos[n["id"]] = (depth + offset, n["speedup"] if n["speedup"] is not None else 0.0)
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    for n in nodes:
        parent = by_id.get(n["parent"]) if n["parent"] is not None else None
        if parent is not None:
            (x0, y0), (x1, y1) = pos[parent["id"]], pos[n["id"]]
            ax.plot([x0, x1], [y0, y1], color="0.75", lw=0.8, zorder=1)
    for n in nodes:
        x, y = pos[n["id"]]
        ok = n["speedup"] is not None
        ax.scatter([x], [y], s=46 if ok else 30, marker="o" if ok else "x", zorder=3,
                   color=STATE_COLOURS.get(n["state"], "tab:gray"))
        if n.get("best"):
            ax.scatter([x], [y], s=160, facecolors="none", edgecolors="tab:blue", lw=1.5, zorder=4)
        if ok and n["depth"] > 0:
            ax.annotate(str(n["direction"])[:14], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6,
                        color="0.35")
    top = max([1.0] + [n["speedup"] for n in nodes if n["speedup"] is not None])
    ax.set_ylim(-0.05 * top, top * 1.15)
    ax.axhline(1.0, color="0.6", lw=0.8, ls="--")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round (0: the first kernel and its fixes)")
    ax.set_ylabel(f"speedup over {BASELINES[baseline]}\n(not correct: on the axis, x)")
    states = sorted({n["state"] for n in nodes})
    handles = [Line2D([], [], ls="", marker="o" if s == "correct" else "x", color=STATE_COLOURS.get(s, "tab:gray"),
                      label=f"{s} ({sum(n['state'] == s for n in nodes)})") for s in states]
    handles.append(Line2D([], [], ls="", marker="o", markerfacecolor="none", markeredgecolor="tab:blue",
                          markersize=10, label="best kernel"))
    ax.legend(handles=handles, fontsize=7, loc="upper left")
    ax.set_title(f"{title}: search tree, {len(nodes)} nodes", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
