"""The reference-transfer matrix: single-shot correctness per (source, target) backend pair, with the source's
kernel as the reference and without one, from an experiment's problem runs."""

from __future__ import annotations

import pandas as pd

#: The transfer matrix's columns: per model, reference kind, source and target backend.
TRANSFER_COLUMNS = ["model", "kind", "source", "target", "n", "correct_with", "correct_without"]


def transfer_matrix(runs: pd.DataFrame) -> pd.DataFrame:
    """The reference-transfer matrix, one row per (model, kind, source, target): of the ``n`` problems the target
    ran both ways, how many single shots were correct with the source's kernel as the reference
    (``reference`` tag ``KIND:SOURCE``) and how many without one (``none``)."""
    if runs.empty or "reference" not in runs.columns:
        return pd.DataFrame(columns=TRANSFER_COLUMNS)
    tag = runs["reference"].astype(str)
    base = runs[tag == "none"]
    rows = []
    for (model, target, ref), group in runs[tag.str.contains(":")].groupby(["model", "backend", "reference"]):
        without = base[(base["model"] == model) & (base["backend"] == target)]
        both = sorted(set(group["problem"]) & set(without["problem"]))
        if not both:
            continue
        kind, source = str(ref).split(":", 1)
        rows.append({"model": model, "kind": kind, "source": source, "target": target, "n": len(both),
                     "correct_with": int(group[group["problem"].isin(both)]["correct"].sum()),
                     "correct_without": int(without[without["problem"].isin(both)]["correct"].sum())})
    return pd.DataFrame(rows, columns=TRANSFER_COLUMNS).sort_values(["model", "kind", "source", "target"],
                                                                     ignore_index=True)


def transfer_markdown(matrix: pd.DataFrame) -> str:
    """The matrix as Markdown, one table per model and kind: sources down, targets across, each cell
    ``with / without`` of ``n`` single shots correct (— where the pair did not run or is one backend)."""
    parts = []
    for (model, kind), m in matrix.groupby(["model", "kind"]):
        targets, sources = sorted(set(m["target"])), sorted(set(m["source"]))
        cells = {(r.source, r.target): f"{r.correct_with}/{r.n} ({r.correct_without}/{r.n} without)"
                 for r in m.itertuples()}
        parts.append(f"#### {model}, reference={kind}: source (rows) x target (columns)\n\n"
                     f"| source \\ target | {' | '.join(targets)} |\n|{' --- |' * (len(targets) + 1)}\n"
                     + "\n".join(f"| {s} | " + " | ".join(cells.get((s, t), "—") for t in targets) + " |"
                                 for s in sources))
    return "\n\n".join(parts) + ("\n\nEach cell: single-shot correct with the source's kernel in the prompt / "
                                 "without any reference, over the problems the target ran both ways.\n" if parts else "")
