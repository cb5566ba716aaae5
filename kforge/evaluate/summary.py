"""The summary of a `kforge eval`: per level, correctness, fast_p, geomean speedup, states, flags.

It reads results rows (plain dicts, as `kforge.evaluate.make_row` writes them), so it works on any
``--out`` file. Metrics are per candidate file (several samples of a problem each count). Rows in state
``error`` (kforge could not verify them) are counted but left out of every rate. Problems that any row
flags ``degenerate`` (the verifier's ``problem_flags``: a constant output would pass its comparison) are left out
of fast_p and the geomean: a speedup on such a problem says nothing about the kernel. ``degenerate_kernelbench``
(a constant passes KernelBench's looser comparison alone: a bf16 softmax over long rows under its 1e-2) leaves a
problem out of the kernelbench rows' figures only. The summary says what the rows were judged at (``judged``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from ..metrics import fast_p, geomean, speedup_over
from ..verify.verdict import correct_under

SIDE_BY_SIDE = ("kforge", "kernelbench")
"""The rule sets the summary reports beside each other (`kforge.verify.rules`): kforge's (the candidate's own
kernels did the work) and KernelBench's (matching outputs suffice), so figures compare with its leaderboard."""
FAST = (0.0, 1.0, 1.5, 2.0)
"""The fast_p thresholds reported (KernelBench's fast_0 is the correctness rate over counted candidates)."""
ERROR_STATE = "error"
"""A row's state when kforge could not verify the file at all (its problem is missing or does not load)."""


def _speedup(row: dict[str, Any], baseline: str) -> float | None:
    return speedup_over(baseline, row.get("speedup_eager"), row.get("speedup_compile"))


def row_correct(row: dict[str, Any], rules: str) -> bool:
    """Whether a row is correct under a rule set (`kforge.verify.verdict.correct_under`)."""
    return correct_under(row.get("states") or {}, rules, row.get("state"))


def group_stats(rows: list[dict[str, Any]], baseline: str = "eager",
                degenerate: set[str] | None = None, rules: str = "kforge") -> dict[str, Any]:
    """Every figure of the summary for one group of rows (a level, or all of them), under one rule set."""
    degenerate = degenerate or set()
    verified = [r for r in rows if r.get("state") != ERROR_STATE]
    counted = [r for r in verified if r.get("problem") not in degenerate]
    outcomes = [(row_correct(r, rules), _speedup(r, baseline)) for r in counted]
    timed = any(s is not None for _, s in outcomes)
    correct = [r for r in verified if row_correct(r, rules)]
    shares = [r["kernel_share"] for r in correct if isinstance(r.get("kernel_share"), (int, float))]
    flags: dict[str, set[str]] = {}
    for r in rows:
        for f in r.get("problem_flags") or []:
            flags.setdefault(f, set()).add(r.get("problem") or "")
    out: dict[str, Any] = {
        "candidates": len(rows), "verified": len(verified), "errors": len(rows) - len(verified),
        "correct": len(correct),
        "correct_pct": 100.0 * len(correct) / len(verified) if verified else None,
        "problems": len({r.get("problem") for r in rows} - {None}),
        "problems_solved": len({r.get("problem") for r in correct}),
        "fast_p_candidates": len(counted), "timed": timed}
    for p in FAST:
        # Without timing (--no-timing) no candidate has a speedup: fast_p above 0 is unknown, not zero.
        out[f"fast_{p:g}"] = fast_p(outcomes, p) if counted and (p == 0 or timed) else None
    out["geomean_speedup"] = geomean(s for c, s in outcomes if c)
    out["kernel_share_mean"] = sum(shares) / len(shares) if shares else None
    out["states"] = dict(sorted(Counter((r.get("states") or {}).get(rules) or r.get("state") or "?"
                                        for r in rows).items()))
    out["problem_flags"] = {f: len(ps) for f, ps in sorted(flags.items())}
    out["degenerate_problems"] = len(left_out := sorted({r.get("problem") for r in rows} & degenerate))
    out["degenerate_names"] = left_out
    return out


def summarise(rows: Iterable[dict[str, Any]], baseline: str = "eager") -> dict[str, Any]:
    """Per-level and overall figures, and the rows kforge could not verify (with why)."""
    rows = list(rows)
    levels: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        levels.setdefault(str(r["level"]) if r.get("level") is not None else "-", []).append(r)
    order = sorted(levels, key=lambda k: (k == "-", int(k) if k.isdigit() else 0))
    by_rules = {}
    for rules in SIDE_BY_SIDE:
        degenerate = _degenerate(rows, rules)
        by_rules[rules] = {"levels": {k: group_stats(levels[k], baseline, degenerate, rules) for k in order},
                           "all": group_stats(rows, baseline, degenerate, rules)}
    return {
        "baseline": baseline,
        "judged": _judged(rows),
        **by_rules["kforge"],
        "rules": by_rules,
        "not_verified": [{"candidate": r.get("candidate"), "problem": r.get("problem"), "error": r.get("error")}
                         for r in rows if r.get("state") == ERROR_STATE]}


def _degenerate(rows: list[dict[str, Any]], rules: str) -> set[str]:
    """The problems whose figures a rule set leaves out: a constant output passes its comparison."""
    flags = {"degenerate"} | ({"degenerate_kernelbench"} if rules == "kernelbench" else set())
    return {r.get("problem") or "" for r in rows if flags & set(r.get("problem_flags") or [])}


def _judged(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """What the verified rows were judged at: each setting's values among them (one, for a run of its own); where
    none was verified, what the error rows were to be judged at (a bf16 run of missing problems said fp32)."""
    out: dict[str, set] = {}
    verified = [r for r in rows if r.get("state") != ERROR_STATE]
    for r in verified or [r for r in rows if r.get("judged")]:
        for k, v in (r.get("judged") or {"precision": r.get("precision") or "fp32"}).items():
            out.setdefault(k, set()).add(v if isinstance(v, (str, int, float, bool)) or v is None else str(v))
    return {k: sorted(v, key=str) for k, v in sorted(out.items())}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["level", "rules", "files", "correct", *[f"fast_{p:g}" for p in FAST], "geomean", "kernel_share", "states"]
    body = []
    by_rules = summary.get("rules") or {"kforge": {"levels": summary["levels"], "all": summary["all"]}}
    names = list(summary["levels"]) + (["all"] if len(summary["levels"]) > 1 else [])
    groups = [(name, rules, (r["levels"].get(name) if name != "all" else r["all"]))
              for name in names for rules, r in by_rules.items()]
    for name, rules, g in groups:
        gm, ks = g["geomean_speedup"], g["kernel_share_mean"]
        files = str(g["candidates"]) if not g.get("errors") else f"{g['verified']} of {g['candidates']}"
        body.append([name, rules, files,  # the rates are over the verified files: say how many those are
                     "-" if g["correct_pct"] is None else f"{g['correct_pct']:.1f}%",
                     *[_pct(g[f"fast_{p:g}"]) for p in FAST],
                     "-" if gm is None else f"{gm:.2f}x", "-" if ks is None else f"{100 * ks:.0f}%",
                     " ".join(f"{k}={n}" for k, n in g["states"].items())])
    return head, body


def _notes(summary: dict[str, Any]) -> list[str]:
    g = summary["all"]
    judged = summary.get("judged") or {}
    precision = "/".join(map(str, judged.get("precision") or ["fp32"]))
    lines = [f"judged at {precision}" + (" (inputs and weights cast; the kforge rules compare with the float32 "
                                         "truth)" if precision in ("bf16", "fp16") else "")]
    if g.get("timed", True):
        lines.append(f"speedups against {'torch.compile' if summary['baseline'] == 'compile' else 'eager PyTorch'} "
                     f"at that precision; fast_p: correct and faster than that by more than p, over "
                     f"{g['fast_p_candidates']} file(s)")
    else:
        lines.append(f"nothing was timed (--no-timing): fast_0 is the share correct over {g['fast_p_candidates']} "
                     "file(s), fast_p above 0 unknown")
    lines.append("rules: kforge counts a file correct when its own kernels computed the answer; kernelbench as "
                 "KernelBench's harness does (matching outputs suffice); kernel_share: the mean over its correct files")
    if g["problem_flags"]:
        lines.append("problem flags: " + ", ".join(f"{f} {n} problem(s)" for f, n in g["problem_flags"].items()))
    for rules, r in (summary.get("rules") or {"kforge": summary}).items():
        if r["all"]["degenerate_problems"]:
            names = r["all"].get("degenerate_names") or []
            lines.append(f"{rules}: {r['all']['degenerate_problems']} degenerate problem(s) left out of fast_p and the "
                         f"geomean (a constant output would pass there): {', '.join(names[:5])}"
                         + (" ..." if len(names) > 5 else ""))
    bad = summary["not_verified"]
    if bad:
        lines.append(f"{len(bad)} file(s) not verified (state error):")
        lines += [f"  {b['candidate']}: {b['error']}" for b in bad[:10]]
        if len(bad) > 10:
            lines.append(f"  ... and {len(bad) - 10} more (rows with state error in the results)")
    return lines


def render_text(summary: dict[str, Any]) -> str:
    """The summary as an aligned plain-text table and a few notes (what `kforge eval` prints)."""
    head, body = _table(summary)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head) - 1)]
    lines = ["  ".join([*(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))), r[-1]])
             for r in [head, *body]]
    return "\n".join(lines + _notes(summary))


def render_markdown(summary: dict[str, Any], title: str = "kforge eval") -> str:
    head, body = _table(summary)
    precision = "/".join(map(str, (summary.get("judged") or {}).get("precision") or []))
    title = f"{title} at {precision}" if precision else title
    lines = [f"# {title}", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    notes = [f"  - {n.strip()}" if n.startswith("  ") else f"- {n}" for n in _notes(summary)]
    return "\n".join(lines + [""] + notes) + "\n"


def summary_paths(out: Path) -> tuple[Path, Path]:
    """Where the summary of ``out`` goes: ``results.jsonl`` -> ``results.summary.json`` and ``.summary.md``."""
    return out.with_suffix(".summary.json"), out.with_suffix(".summary.md")


def write_summary(out: Path, summary: dict[str, Any], title: str = "kforge eval") -> tuple[Path, Path]:
    js, md = summary_paths(out)
    js.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    md.write_text(render_markdown(summary, title))
    return js, md
