"""The ablation tables as files: Markdown, CSV and LaTeX (booktabs). What a table shows and its caption and
notes are `layout`'s: the notes stand beside the table (under the Markdown table, in ``NAME_notes.tex`` for
LaTeX, whose results are two tables, correctness and speed). Markdown and LaTeX use a reader's words
(``Single shot``); the CSVs keep the identifiers, every column and row, and say their units."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from .layout import PARTS, Cell, caption, layout, notes, part_keys, row_keys
from .plots import title_of
from .runs import dedupe, kernel_timings, load_runs, timings_frame
from .tables import ABLATIONS, COLUMNS, Context, ablation_table, arm_keys, by_iteration, fast_p_curve, not_llms
from .transfer import transfer_markdown, transfer_matrix

#: LaTeX for characters that are special to it or outside what pdflatex reads by default.
LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
         "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
         ">": r"\textgreater{}", "|": r"\textbar{}", "–": "--", "†": r"\textsuperscript{\dag}", "×": r"$\times$"}
#: KernelBench's fast_p as a paper writes it (fast$_{1.5}$), in headings and prose.
FAST_P = re.compile(r"fast\\_(p|[\d.]*\d)")


def latex_escape(text: Any) -> str:
    return "".join(LATEX.get(ch, ch) for ch in str(text))


def latex_prose(text: str) -> str:
    """``text`` escaped, with fast_p written as a paper writes it."""
    return FAST_P.sub(lambda m: f"fast$_{{{m.group(1)}}}$", latex_escape(text))


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
    first, _, rest = head.partition(" ")
    return _stack(latex_prose(first), latex_prose(rest))


def _grouped(rows: list[list[Cell]], lead: int) -> list[tuple[bool, list[Cell]]]:
    """Rows with their first ``lead`` cells left blank where they repeat the row above (a model's name once for its
    block, as a paper prints it), each with whether it starts a new block of the first column."""
    out, above = [], None
    for row in rows:
        same = 0
        while above is not None and same < lead and row[same] == above[same]:
            same += 1
        out.append((above is not None and lead > 0 and same == 0, [("", "")] * same + row[same:]))
        above = row
    return out


#: About the width of one column of a two-column paper (3.3 in at 10 pt), in ems.
COLUMN_EM = 24.0


def width_em(heads: list[str], rows: list[list[Cell]]) -> float:
    """A rough width of the typeset table in ems (half an em a character, intervals a size smaller, 1.2 em
    between columns): whether it fits one column of a two-column paper."""
    def col(i: int) -> float:
        words = max((len(w) for w in heads[i].split(" ", 1)), default=0)
        cells = max((max(len(r[i][0]), 0.8 * len(r[i][1])) for r in rows), default=0)
        return 0.5 * max(words, cells) + 1.2
    return sum(col(i) for i in range(len(heads)))


def to_latex(heads: list[str], rows: list[list[Cell]], text: str, label: str, notes_file: str = "",
             lead: int = 0) -> str:
    """A booktabs table environment to ``\\input``; the preamble needs ``\\usepackage{booktabs,graphicx}``.

    The caption is ``text`` (short); the notes are in ``notes_file`` beside it. A table that fits one column of
    a two-column paper (`width_em`) is a ``table``; a wider one a ``table*``, which spans both columns there and
    is a plain table in a one-column document. The type is the document's, intervals a
    size smaller; a table still wider than the text (many models, backends and levels at once) is scaled down
    to its width, never up. The first ``lead`` columns (model, backend, level) print once per block.
    """
    head = " & ".join(_tex_head(h) for h in heads) + r" \\"
    body = [(r"\addlinespace" + "\n" if new else "") + " & ".join(_tex_cell(c) for c in row) + r" \\"
            for new, row in _grouped(rows, lead)]
    env = "table" if width_em(heads, rows) <= COLUMN_EM else "table*"
    return "\n".join([
        r"% kforge ablation table; needs \usepackage{booktabs,graphicx}"
        + (f"; its notes (what each column is) are in {notes_file}" if notes_file else ""),
        rf"\begin{{{env}}}[htbp]", r"\centering", rf"\caption{{{latex_prose(text)}}}",
        rf"\label{{tab:{label}}}", r"\smallskip", r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%",
        rf"\begin{{tabular}}{{{'l' * len(heads)}}}", r"\toprule", head, r"\midrule", *body, r"\bottomrule",
        r"\end{tabular}}", rf"\end{{{env}}}", ""])


def to_csv_frame(table: pd.DataFrame, factor: str) -> pd.DataFrame:
    """Numbers, not text: each column's value, interval bounds and counts."""
    rows = []
    for _, r in table.iterrows():
        row: dict[str, Any] = {k: r[k] for k in (*arm_keys(factor)[:-1], "level", factor)}
        for c in COLUMNS:
            v = r[c.key]
            row.update(v.flat(c.key) if hasattr(v, "flat") else {c.key: v})
        rows.append(row)
    return pd.DataFrame(rows)


def write_table(table: pd.DataFrame, factor: str, out_dir: Path, name: str, ctx: Context,
                not_llms: dict[str, str]) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    lay = layout(table, factor, not_llms)
    text, more = caption(name, factor, ctx, not_llms, lay), notes(ctx)
    paths = {"md": out_dir / f"{name}.md", "csv": out_dir / f"{name}.csv", "tex": out_dir / f"{name}.tex",
             "notes": out_dir / f"{name}_notes.tex", "timings": out_dir / f"{name}_timings.csv"}
    paths["md"].write_text(f"### {title_of(name)}\n\n{to_markdown(lay.heads, lay.rows)}\n{text}\n\nNotes. {more}\n")
    to_csv_frame(table, factor).to_csv(paths["csv"], index=False)
    label = name.replace("_", "-")
    tables = []
    for i, (part, shows, columns) in enumerate(PARTS):  # correctness, then speed: each fits a page
        sub = lay.columns(part_keys(lay, factor, columns, first=i == 0))
        tables.append(to_latex(sub.heads, sub.rows, caption(name, factor, ctx, not_llms, sub, shows),
                               f"{label}-{part}", paths["notes"].name,
                               lead=sum(k in row_keys(factor) for k in sub.keys)))
    paths["tex"].write_text("\n".join(tables))
    paths["notes"].write_text(f"% notes to Tables~\\ref{{tab:{label}-{PARTS[0][0]}}} and~\\ref{{tab:{label}-{PARTS[1][0]}}} "
                              f"(kforge)\n{latex_prose(more)}\n")
    timings_frame(ctx.timings).rename(columns=timing_columns(ctx.baseline)).to_csv(paths["timings"], index=False)
    return paths


def timing_columns(baseline: str) -> dict[str, str]:
    """The timings CSV's columns by what they hold: speedups over the baseline, not times."""
    return {"timings": "timings_n", "min": f"min_speedup_vs_{baseline}", "median": f"median_speedup_vs_{baseline}",
            "max": f"max_speedup_vs_{baseline}", "spread": "spread_fastest_over_slowest_minus_1"}


def speedup_points(table: pd.DataFrame, factor: str) -> pd.DataFrame:
    """The table's geomeans with their intervals and timing ranges, as plain numbers for the speedup plot."""
    keys = [*arm_keys(factor)[:-1], "level", factor]
    return pd.DataFrame([{**{k: r[k] for k in keys}, "n": r["n"], "geomean": r["geomean_speedup"].value,
                          "ci_lo": r["geomean_speedup"].lo, "ci_hi": r["geomean_speedup"].hi,
                          "range_lo": r["timing_range"].lo, "range_hi": r["timing_range"].hi}
                         for _, r in table.iterrows()],
                        columns=[*keys, "n", "geomean", "ci_lo", "ci_hi", "range_lo", "range_hi"])


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
