"""What an ablation table shows a reader, and how: its columns and cells, and the caption and notes beside it.

A paper prints the table as it is, so what every row shares (one model, one backend, one precision, one level,
the same n, no degenerate problem) is said once in the caption instead of in a column of repeats; the two rule sets
read the same way in every heading (``Correct (kforge)``, ``fast_1 (KB)``); rates show as k/n with their
interval in percent; and the notes are three sentences. In LaTeX the results split into two tables that fit
a page at the document's type size: correctness (the rates, under both rule sets) and speed (the geomean,
its timing range, the kernel share). `render` writes the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from .plots import factor_name, title_of, value_name
from .runs import timing_noise
from .tables import COLUMNS, Context, Estimate, TimingRange

#: What a speedup's baseline is, in a caption.
BASELINES = {"eager": "PyTorch eager", "compile": "torch.compile of the reference"}
#: The columns that say what a row is; each moves to the caption when every row has the same value (so a table of
#: one precision says which there), unless it is the ablation's factor.
KEYS = ("model", "backend", "precision", "level")
#: Columns that describe the problems rather than measure an arm: also moved to the caption when constant.
CONTEXT = ("n", "degenerate")
#: Headings by column key (a column not named here shows its own header): the rule set in parentheses, alike.
HEADINGS = {"n": "n", "correct": "Correct (kforge)", "fast_1": "fast_1 (kforge)", "fast_1.5": "fast_1.5 (kforge)",
            "correct_kb": "Correct (KB)", "fast_1_kb": "fast_1 (KB)", "kernel_share": "Kernel share",
            "degenerate": "Degenerate", "geomean_speedup": "Geomean speedup", "timing_range": "Timing range",
            "within_noise": "Within noise"}
#: Shares of something (not k of n problems): a percentage.
SHARES = ("kernel_share",)

Cell = tuple[str, str]
"""A cell's main text, and its detail (an interval, a count; may be empty)."""


@dataclass(frozen=True)
class Layout:
    """One ablation table as a reader sees it."""

    heads: list[str]
    rows: list[list[Cell]]
    keys: list[str]
    """The column keys of ``heads``, in order (``factor`` and `KEYS` among them)."""
    fixed: list[tuple[str, str]]
    """What every row shares, (what, value), said in the caption instead."""
    pooled: bool
    """Whether an ``all`` level row pools several levels."""

    def columns(self, wanted: list[str]) -> "Layout":
        """The same table with only the columns ``wanted``, in that order."""
        idx = [self.keys.index(k) for k in wanted if k in self.keys]
        return Layout([self.heads[i] for i in idx], [[row[i] for i in idx] for row in self.rows],
                      [self.keys[i] for i in idx], self.fixed, self.pooled)


def _pct(lo: float, hi: float) -> str:
    return f"[{lo * 100:.0f}–{hi * 100:.0f}%]"


def cell(key: str, value: Any) -> Cell:
    """A value as the table prints it: k/n [interval in %], a share in %, a geomean [interval], a range (count)."""
    if isinstance(value, Estimate):
        if value.value is None:
            return "-", ""
        if value.k is not None:
            return f"{value.k}/{value.n}", _pct(value.lo, value.hi)
        if key in SHARES:
            return f"{value.value:.0%}", _pct(value.lo, value.hi)
        return f"{value.value:.2f}", f"[{value.lo:.2f}–{value.hi:.2f}]"
    if isinstance(value, TimingRange):
        return value.parts()
    return str(value), ""


def _model(model: str, not_llms: dict[str, str]) -> str:
    return f"{model}†" if model in not_llms else str(model)


def layout(table: pd.DataFrame, factor: str, not_llms: dict[str, str]) -> Layout:
    """The table's headings and cells, less the columns whose value every row shares (those go to `fixed`)."""
    texts = {"model": [_model(m, not_llms) for m in table["model"]], "backend": [str(b) for b in table["backend"]],
             "precision": [value_name("precision", v) for v in table["precision"]],
             "level": [str(v) for v in table["level"]], factor: [value_name(factor, v) for v in table[factor]]}
    cells = {k: [(t, "") for t in v] for k, v in texts.items()}
    cells.update({c.key: [cell(c.key, v) for v in table[c.key]] for c in COLUMNS})
    order = [*row_keys(factor), factor, *(c.key for c in COLUMNS)]
    several = len(table) > 1
    fixed, keys = [], []
    for key in order:
        if key in (*row_keys(factor), *CONTEXT) and (not several or len(set(cells[key])) == 1):
            fixed.append((key, cells[key][0][0]))
        else:
            keys.append(key)
    heads = [factor_name(k) if k in (*KEYS, factor) else HEADINGS.get(k, _header(k)) for k in keys]
    rows = [[cells[k][i] for k in keys] for i in range(len(table))]
    return Layout(heads, rows, keys, fixed, "all" in texts["level"])


def row_keys(factor: str) -> list[str]:
    """`KEYS` less the factor (the precision ablation's is the precision: a column however many it has)."""
    return [k for k in KEYS if k != factor]


def _header(key: str) -> str:
    return next(c.header for c in COLUMNS if c.key == key)


def _fixed_phrase(fixed: list[tuple[str, str]]) -> str:
    """``oracle† on cpu at FP32, level 1, n = 6 problems, none degenerate``: what every row shares."""
    got = dict(fixed)
    parts = []
    if "model" in got:
        parts.append(got["model"])
    if "backend" in got:
        parts.append(f"on {got['backend']}")
    if "precision" in got:
        parts.append(f"at {got['precision']}")
    head = " ".join(parts)
    if "level" in got:
        head = ", ".join(p for p in (head, f"level {got['level']}") if p)
    extra = []
    if "n" in got:
        extra.append(f"n = {got['n']}")
    if "degenerate" in got:
        extra.append("none degenerate" if got["degenerate"] == "0" else f"{got['degenerate']} degenerate")
    return ", ".join(p for p in [head, *extra] if p)


#: The two LaTeX tables an ablation prints as: (name, what its caption says it shows, its column keys).
PARTS = (("correctness", "problems solved (k/n) and fast_p over {baseline}, under kforge's and KernelBench's (KB) "
                         "rules", ("n", "correct", "fast_1", "fast_1.5", "correct_kb", "fast_1_kb")),
         ("speed", "geomean speedup of correct kernels over {baseline}, its timing range, the problems whose speedup "
                   "is within noise, and the kernel share",
          ("n", "degenerate", "geomean_speedup", "timing_range", "within_noise", "kernel_share")))


def part_keys(lay: Layout, factor: str, columns: tuple[str, ...], first: bool) -> list[str]:
    """A part's columns: the row's keys, its own, and (in the first part) any column no part names."""
    named = {k for _, _, cols in PARTS for k in cols}
    own = [k for k in columns if k in lay.keys]  # in the part's order
    unnamed = [k for k in lay.keys if first and k not in named and k not in (*KEYS, factor)]
    return [k for k in lay.keys if k in (*KEYS, factor)] + own + unnamed


def caption(name: str, factor: str, ctx: Context, not_llms: dict[str, str], lay: Layout,
            shows: str | None = None) -> str:
    """A sentence or two, as a paper's caption: what is compared by what, over what, what every row shares, what
    the brackets are, and the rows that are not LLMs."""
    by = [factor_name(k).lower() for k in (factor, *row_keys(factor)) if k in lay.keys]
    what = (shows or "correctness and speedup over {baseline}").format(baseline=BASELINES[ctx.baseline])
    if factor == "precision" or "precision" in lay.keys:  # a bf16 kernel's speedup is over bf16 eager
        what += " at each row's own precision"
    text = (f"{title_of(name)}: {what}, by {', '.join(by[:-1]) + ' and ' if len(by) > 1 else ''}{by[-1]}"
            + (" (level all pools the levels)" if lay.pooled else ""))
    fixed = _fixed_phrase(lay.fixed)
    text += (f"; {fixed}." if fixed else ".") + f" Brackets: {ctx.confidence:.0%} bootstrap intervals over problems."
    if not_llms:
        text += " † Not an LLM: " + "; ".join(what for _, what in sorted(not_llms.items())) + "."
    return text


def notes(ctx: Context) -> str:
    """Three sentences for the text beside the table: how speedup is measured, the two rule sets, the timing
    range with how much repeated timings varied, and what is left out."""
    base = BASELINES[ctx.baseline]
    noise = timing_noise(ctx.timings)
    kernels = f"{noise.kernels} kernel{'s' if noise.kernels > 1 else ''}"
    varied = (f" ({kernels} timed repeatedly varied by a median of {noise.median:.0%}, at most {noise.worst:.0%})"
              if noise.kernels else "")
    return (f"Speedup is {base}'s median time over the kernel's, both timed in one process; fast_p counts correct "
            "kernels more than p times faster; the geomean is over correct kernels. "
            "Under kforge's rules the candidate's own kernels must do the work (the kernel share: their part of the "
            "device time); under KernelBench's (KB), matching outputs suffice. "
            f"The timing range is the geomean had each best kernel taken its slowest or fastest timing in this "
            f"experiment{varied}; within noise counts problems whose speedup's interval spans 1; degenerate "
            "problems (a constant output passes) are left out of fast_p and speed.")
