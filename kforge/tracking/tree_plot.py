"""A beam search's tree as a picture: drawn from its records and left on the problem's MLflow run
(`kforge.tracking.tracker.Tracker`, the schema's ``Files.TREE_PLOT``)."""

from __future__ import annotations

from pathlib import Path

from ..figure import BASELINE_NAMES, integer_ticks, pyplot

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
    plt = pyplot()
    from matplotlib.lines import Line2D
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
    integer_ticks(ax)
    ax.set_xlabel("round (0: the first kernel and its fixes)")
    ax.set_ylabel(f"speedup over {BASELINE_NAMES[baseline]}\n(not correct: on the axis, x)")
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
