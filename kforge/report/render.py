"""The ablation tables as files: Markdown, CSV and LaTeX (booktabs), each with a caption that says
what the speedup is measured against, what the intervals are, and which rows are not LLMs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from .tables import (ABLATIONS, COLUMNS, Context, ablation_table, by_iteration, dedupe, fast_p_curve, kernel_timings,
                     load_runs, not_llms, timing_noise, timings_frame)

#: What a speedup's baseline is, in a caption.
BASELINES = {"eager": "PyTorch eager", "compile": "torch.compile of the reference"}
#: LaTeX for characters that are special to it or outside what pdflatex reads by default.
LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
         "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
         ">": r"\textgreater{}", "|": r"\textbar{}", "–": "--", "†": r"\textsuperscript{\dag}", "×": r"$\times$"}


def latex_escape(text: Any) -> str:
    return "".join(LATEX.get(ch, ch) for ch in str(text))


def caption(name: str, factor: str, ctx: Context, not_llms: dict[str, str]) -> str:
    """One paragraph: the rows, the speedup's baseline, each column, the timing noise, the non-LLMs."""
    parts = [f"{name}: one row per model, backend, level and {factor}; level all pools the levels.",
             f"Speedup = time of {BASELINES[ctx.baseline]} / time of the kernel (medians of timed calls, "
             "measured in the same process)."]
    fill = {"baseline": BASELINES[ctx.baseline], "confidence": f"{ctx.confidence:.0%}"}
    parts += [c.caption.format(**fill) for c in COLUMNS if c.caption]
    noise = timing_noise(ctx.timings)
    if noise.kernels:
        parts.append(f"Kernels timed more than once in this experiment ({noise.kernels}) varied between timings by a "
                     f"median of {noise.median:.0%} and at most {noise.worst:.0%} (fastest / slowest - 1).")
    if not_llms:
        parts.append("† not an LLM: " + "; ".join(f"{m} = {what}" for m, what in sorted(not_llms.items())) + ".")
    return " ".join(parts)


Cell = tuple[str, str]
"""A cell's main text, and its detail (an interval, a count; may be empty)."""


def cells(table: pd.DataFrame, factor: str, not_llms: dict[str, str]) -> tuple[list[str], list[list[Cell]]]:
    """Headings and every cell."""
    heads = ["model", "backend", "level", factor, *(c.header for c in COLUMNS)]
    rows = []
    for _, r in table.iterrows():
        model = f"{r['model']}†" if r["model"] in not_llms else str(r["model"])
        values = [v.parts() if hasattr(v, "parts") else (str(v), "") for v in (r[c.key] for c in COLUMNS)]
        rows.append([(model, ""), (str(r["backend"]), ""), (str(r["level"]), ""), (str(r[factor]), ""), *values])
    return heads, rows


def to_markdown(heads: list[str], rows: list[list[Cell]]) -> str:
    def text(cell: Cell) -> str:
        return " ".join(p for p in cell if p).replace("|", "\\|")
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
    lines += ["| " + " | ".join(text(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _stack(top: str, below: str) -> str:
    return rf"\begin{{tabular}}[t]{{@{{}}l@{{}}}}{top}\\ {below}\end{{tabular}}" if below else top


def _tex_cell(cell: Cell) -> str:
    # The detail goes under the value, smaller: an interval beside every value made tables twice as wide.
    main, detail = (latex_escape(p) for p in cell)
    return _stack(main, detail and rf"\scriptsize {detail}")


def _tex_head(head: str) -> str:
    first, _, rest = head.partition(" ")
    return _stack(latex_escape(first), latex_escape(rest))


def to_latex(heads: list[str], rows: list[list[Cell]], text: str, label: str) -> str:
    """A booktabs table environment to ``\\input``; the preamble needs ``\\usepackage{booktabs,graphicx}``.

    A table wider than the text is scaled down to its width (never up).
    """
    head = " & ".join(_tex_head(h) for h in heads) + r" \\"
    body = [" & ".join(_tex_cell(c) for c in row) + r" \\" for row in rows]
    return "\n".join([
        r"% kforge ablation table; needs \usepackage{booktabs,graphicx}",
        r"\begin{table}[htbp]", r"\centering", r"\small", rf"\caption{{{latex_escape(text)}}}",
        rf"\label{{tab:{label}}}", r"\smallskip", r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%",
        rf"\begin{{tabular}}{{{'l' * len(heads)}}}", r"\toprule", head, r"\midrule", *body, r"\bottomrule",
        r"\end{tabular}}", r"\end{table}", ""])


def to_csv_frame(table: pd.DataFrame, factor: str) -> pd.DataFrame:
    """Numbers, not text: each column's value, interval bounds and counts."""
    rows = []
    for _, r in table.iterrows():
        row: dict[str, Any] = {k: r[k] for k in ("model", "backend", "level", factor)}
        for c in COLUMNS:
            v = r[c.key]
            row.update(v.flat(c.key) if hasattr(v, "flat") else {c.key: v})
        rows.append(row)
    return pd.DataFrame(rows)


def write_table(table: pd.DataFrame, factor: str, out_dir: Path, name: str, ctx: Context,
                not_llms: dict[str, str]) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    heads, rows = cells(table, factor, not_llms)
    text = caption(name, factor, ctx, not_llms)
    paths = {"md": out_dir / f"{name}.md", "csv": out_dir / f"{name}.csv", "tex": out_dir / f"{name}.tex",
             "timings": out_dir / f"{name}_timings.csv"}
    paths["md"].write_text(f"### {name}\n\n{to_markdown(heads, rows)}\n{text}\n")
    to_csv_frame(table, factor).to_csv(paths["csv"], index=False)
    paths["tex"].write_text(to_latex(heads, rows, text, name.replace("_", "-")))
    timings_frame(ctx.timings).to_csv(paths["timings"], index=False)
    return paths


def build_all(client, out_dir: str | Path, ablations: list[str] | None = None, baseline: str = "eager",
              resamples: int = 2000, confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """Every ablation's table and plots under ``out_dir``; returns what was written per ablation."""
    from .plots import plot_fast_p, plot_iterations
    out = Path(out_dir)
    results = {}
    for name in ablations or list(ABLATIONS):
        experiment, factor = ABLATIONS[name]
        every = load_runs(client, experiment, baseline)
        runs = dedupe(every)
        if runs.empty:
            results[name] = {"experiment": experiment, "runs": 0}
            continue
        ctx = Context(baseline, kernel_timings(every), resamples, confidence)
        table = ablation_table(runs, factor, ctx)
        files = write_table(table, factor, out, name, ctx, not_llms(runs))
        files["fast_p"] = plot_fast_p(fast_p_curve(runs, factor, baseline=baseline), factor,
                                      out / f"{name}_fast_p.png", name, baseline)
        hist = by_iteration(runs, factor)
        if not hist.empty:
            files["iterations"] = plot_iterations(hist, factor, out / f"{name}_by_iteration.png", name, baseline)
        results[name] = {"experiment": experiment, "runs": len(runs), "table": table, "files": files}
    from ..workload.record import write_workload_table
    results.update(write_workload_table(client, out))  # whole_workload, where workload jobs ran (docs/workload.md)
    return results
