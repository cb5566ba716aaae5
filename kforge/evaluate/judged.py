"""What a results row was judged under, and whether a rerun may take it over.

`kforge eval` resumes a results file: a file whose path and content already have a row there is not verified
again. A row judged at another precision, under other rules or with other checks is another verdict, though: taken
over, the fp32 verdicts of a first run would be reported as a ``--precision bf16`` run's. So every row records the
settings that change what its verdict says (``judged``), and a run whose settings differ from a file's rows refuses
to write there, saying what differs, rather than mix them or replace them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

from .summary import ERROR_STATE

#: The verifier's settings that change what a verdict says (`kforge.verify.VerifyConfig` fields); with the size.
JUDGED = ("precision", "rules", "backward", "variants", "require_kernel", "skip_timing", "compile_ref", "atol", "rtol")


def judged_under(config, size: str) -> dict[str, Any]:
    """The settings a verdict under ``config`` at ``size`` is judged under, as a row records them."""
    return {**{k: getattr(config, k) for k in JUDGED}, "size": size}


def _as_judged(row: dict[str, Any]) -> dict[str, Any]:
    """What a row says it was judged under; a row from a kforge before ``judged`` has its verdict's precision."""
    return row.get("judged") or {"precision": row.get("precision") or "fp32"}


def _said(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={settings[k]}" for k in sorted(settings))


def resume_conflict(out: Path, rows: dict[Any, dict[str, Any]], config, size_of: Callable[[str], str],
                    backends: Iterable[str]) -> str | None:
    """Why the verdict rows already in ``out`` (``rows``, as `kforge.evaluate.load_results` reads them) cannot be
    taken over by a run that judges under ``config``, at ``size_of(backend)`` for each of its ``backends``; None
    when they can. Rows of other backends, and error rows (verified again anyway), do not count."""
    backends = set(backends)
    differ: Counter = Counter()
    for row in rows.values():
        backend = row.get("backend", "")
        if backend not in backends or row.get("state") == ERROR_STATE:
            continue
        want = judged_under(config, size_of(backend))
        have = _as_judged(row)
        theirs = {k: v for k, v in have.items() if k in want and v != want[k]}
        if theirs:
            differ[(_said(theirs), _said({k: want[k] for k in theirs}))] += 1
    if not differ:
        return None
    (theirs, ours), n = differ.most_common(1)[0]
    more = f" (and {sum(differ.values()) - n} under other settings)" if len(differ) > 1 else ""
    return (f"{out} holds {n} verdict row(s) judged under {theirs}{more}, and this run judges under {ours}: taking "
            f"them over would report those verdicts as this run's. Give this run another --out FILE, or delete {out} "
            "to judge every file again")
