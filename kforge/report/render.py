"""The ablation tables as files: Markdown, CSV and LaTeX (booktabs). A table has a short caption (what is
compared, over what baseline, what the brackets are) and notes beside it (each column, the timing noise,
the rows that are not LLMs: under the Markdown table, in ``NAME_notes.tex`` for LaTeX). Markdown and LaTeX
use a reader's words (``Single shot``); the CSVs keep the identifiers and say their units."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from .plots import factor_name, title_of, value_name
from .tables import (ABLATIONS, COLUMNS, Context, ablation_table, by_iteration, dedupe, fast_p_curve, kernel_timings,
                     transfer_markdown, transfer_matrix,
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
    """A sentence or two, as a paper's caption: what is compared, over what, what the brackets are."""
    text = (f"{title_of(name)}: correctness and speedup over {BASELINES[ctx.baseline]} per model, backend, level "
            f"and {factor_name(factor).lower()} (level all pools the levels). Brackets: {ctx.confidence:.0%} "
            "bootstrap intervals over problems.")
    return text + (" † Not an LLM." if not_llms else "")


def notes(name: str, factor: str, ctx: Context, not_llms: dict[str, str]) -> str:
    """What the caption leaves out, for the text beside the table: how speedup is measured, each column,
    how much timings varied, what the non-LLM rows are."""
    parts = [f"Speedup = time of {BASELINES[ctx.baseline]} / time of the kernel (medians of timed calls, "
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


#: Column headings as a reader names them (the CSV keeps the keys).
HEADINGS = {"n": "n", "correct": "Correct", "kernel share": "Kernel share", "degenerate": "Degenerate",
            "geomean speedup": "Geomean speedup", "timing range": "Timing range"}


Cell = tuple[str, str]
"""A cell's main text, and its detail (an interval, a count; may be empty)."""


def cells(table: pd.DataFrame, factor: str, not_llms: dict[str, str]) -> tuple[list[str], list[list[Cell]]]:
    """Headings and every cell."""
    heads = ["Model", "Backend", "Level", factor_name(factor), *(HEADINGS.get(c.header, c.header) for c in COLUMNS)]
    rows = []
    for _, r in table.iterrows():
        model = f"{r['model']}†" if r["model"] in not_llms else str(r["model"])
        values = [v.parts() if hasattr(v, "parts") else (str(v), "") for v in (r[c.key] for c in COLUMNS)]
        rows.append([(model, ""), (str(r["backend"]), ""), (str(r["level"]), ""),
                     (value_name(factor, r[factor]), ""), *values])
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
    return _stack(main, detail and rf"\footnotesize {detail}")


def _tex_head(head: str) -> str:
    if re.fullmatch(r"fast_[\d.]+", head):  # KernelBench's fast_p, as a paper writes it
        return rf"fast$_{{{head[5:]}}}$"
    first, _, rest = head.partition(" ")
    return _stack(latex_escape(first), latex_escape(rest))


def to_latex(heads: list[str], rows: list[list[Cell]], text: str, label: str, notes_file: str = "") -> str:
    """A booktabs table environment to ``\\input``; the preamble needs ``\\usepackage{booktabs,graphicx}``.

    The caption is ``text`` (short); the notes are in ``notes_file`` beside it. A table wider than the text
    is scaled down to its width (never up); the type is the document's, intervals a size smaller.
    """
    head = " & ".join(_tex_head(h) for h in heads) + r" \\"
    body = [" & ".join(_tex_cell(c) for c in row) + r" \\" for row in rows]
    return "\n".join([
        r"% kforge ablation table; needs \usepackage{booktabs,graphicx}"
        + (f"; its notes (what each column is) are in {notes_file}" if notes_file else ""),
        r"\begin{table}[htbp]", r"\centering", rf"\caption{{{latex_escape(text)}}}",
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
    text, more = caption(name, factor, ctx, not_llms), notes(name, factor, ctx, not_llms)
    paths = {"md": out_dir / f"{name}.md", "csv": out_dir / f"{name}.csv", "tex": out_dir / f"{name}.tex",
             "notes": out_dir / f"{name}_notes.tex", "timings": out_dir / f"{name}_timings.csv"}
    paths["md"].write_text(f"### {title_of(name)}\n\n{to_markdown(heads, rows)}\n{text}\n\nNotes. {more}\n")
    to_csv_frame(table, factor).to_csv(paths["csv"], index=False)
    paths["tex"].write_text(to_latex(heads, rows, text, name.replace("_", "-"), paths["notes"].name))
    paths["notes"].write_text(f"% notes to Table~\\ref{{tab:{name.replace('_', '-')}}} (kforge)\n"
                              f"{latex_escape(more)}\n")
    timings_frame(ctx.timings).rename(columns=timing_columns(ctx.baseline)).to_csv(paths["timings"], index=False)
    return paths


def timing_columns(baseline: str) -> dict[str, str]:
    """The timings CSV's columns by what they hold: speedups over the baseline, not times."""
    return {"timings": "timings_n", "min": f"min_speedup_vs_{baseline}", "median": f"median_speedup_vs_{baseline}",
            "max": f"max_speedup_vs_{baseline}", "spread": "spread_fastest_over_slowest_minus_1"}


def speedup_points(table: pd.DataFrame, factor: str) -> pd.DataFrame:
    """The table's geomeans with their intervals and timing ranges, as plain numbers for the speedup plot."""
    return pd.DataFrame([{"model": r["model"], "backend": r["backend"], "level": r["level"], factor: r[factor],
                          "n": r["n"], "geomean": r["geomean_speedup"].value, "ci_lo": r["geomean_speedup"].lo,
                          "ci_hi": r["geomean_speedup"].hi, "range_lo": r["timing_range"].lo,
                          "range_hi": r["timing_range"].hi} for _, r in table.iterrows()],
                        columns=["model", "backend", "level", factor, "n", "geomean", "ci_lo", "ci_hi", "range_lo",
                                 "range_hi"])


def build_all(client, out_dir: str | Path, ablations: list[str] | None = None, baseline: str = "eager",
              resamples: int = 2000, confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """Every ablation's table and plots under ``out_dir``; returns what was written per ablation."""
    from .plots import plot_fast_p, plot_iterations, plot_speedups
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
        files["speedup"] = plot_speedups(speedup_points(table, factor), factor, out / f"{name}_speedup.png", name,
                                         baseline)
        hist = by_iteration(runs, factor)
        if not hist.empty:
            files["iterations"] = plot_iterations(hist, factor, out / f"{name}_by_iteration.png", name, baseline)
        if name == "reference_transfer":  # the source x target matrix beside the table
            matrix = transfer_matrix(runs)
            files["matrix_csv"] = out / f"{name}_matrix.csv"
            matrix.to_csv(files["matrix_csv"], index=False)
            files["matrix_md"] = out / f"{name}_matrix.md"
            files["matrix_md"].write_text(f"### Reference transfer: source x target\n\n{transfer_markdown(matrix)}")
        results[name] = {"experiment": experiment, "runs": len(runs), "table": table, "files": files}
    from .workload import write_workload_table
    results.update(write_workload_table(client, out))  # whole_workload, where workload jobs ran (docs/workload.md)
    return results
