"""The rows file of `kforge eval`: reading it back to resume, and rewriting it without rows judged again.

A row is of one file judged against one problem on one backend: the same ``relu.py`` listed against two
problems has two rows, and a manifest whose problem was corrected judges the file again. The problem is
recorded as the job named it (``problem_ref``: a file's absolute path, or a built-in's name), since the key
`Problem.key` (``level1/1_ReLU``) of two KernelBench trees is the same. Settings that change a verdict but
not what is judged (precision, rules, size, ...) are not part of the key: a run judging otherwise refuses
the whole file instead (`kforge.evaluate.judged`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .summary import ERROR_STATE

ResumeKey = tuple[str, str, str, str]
_KEYED = "key:"  # marks a row from before problem_ref, keyed by its Problem.key, so it never passes for a ref


def file_hash(path: Path) -> str | None:
    """First 16 hex digits of the file's SHA-256 (None when it cannot be read)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def problem_ref(problem: str | None) -> str:
    """The problem a job names, as its row records it: an existing file's absolute path (however the manifest
    or the command line spelled it), else the name as given (a built-in's)."""
    if not problem:
        return ""
    path = Path(problem).expanduser()
    return str(path.resolve()) if path.exists() else problem.strip()


def resume_key(candidate: str | Path, content_hash: str | None, backend: str, problem: str | None) -> ResumeKey:
    """(candidate, content hash, backend, problem): a row stands for this judgement and no other."""
    return (str(candidate), content_hash or "", backend, problem or "")


def legacy_ref(key: str) -> str:
    """The problem part of a resume key for a row written before rows recorded ``problem_ref``: its `Problem.key`."""
    return _KEYED + key


def row_problem(row: dict[str, Any]) -> str:
    """A row's problem for its key: ``problem_ref``, or for a row from a kforge before it, `legacy_ref` of its key."""
    return str(row["problem_ref"]) if "problem_ref" in row else legacy_ref(str(row.get("problem") or ""))


def load_results(out: Path) -> dict[ResumeKey, dict[str, Any]]:
    """Rows already in a results file, by resume key (the last row wins); unreadable lines are skipped."""
    rows: dict[ResumeKey, dict[str, Any]] = {}
    if not out.is_file():
        return rows
    for line in out.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off when a previous run was killed
        if isinstance(row, dict) and row.get("candidate"):
            rows[resume_key(row["candidate"], row.get("candidate_hash"), row.get("backend", ""), row_problem(row))] = row
    return rows


def not_a_rows_file(out: Path) -> str | None:
    """Why ``out`` must not be written as the rows file (None: it may): a folder, or a file holding anything but
    rows an evaluation wrote (a generation, a manifest: it would be overwritten), a last line cut off by a kill
    aside."""
    if out.is_dir():
        return f"{out}: is a directory; --out names the rows file (JSON lines) to write"
    if not out.is_file():
        return None
    lines = [line for line in out.read_text(errors="replace").splitlines() if line.strip()]
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not (isinstance(row, dict) and row.get("candidate") and "backend" in row and "state" in row):
            if n == len(lines) and n > 1:
                continue  # the last line, cut off when a run was killed: dropped as the next one writes
            return (f"{out}: line {n} is not a row a kforge evaluation wrote ({line[:60]!r}), so --out would overwrite "
                    "the file; name a new file, or the rows file of an earlier evaluation to resume it")
    return None


def drop_rows(out: Path, judged: set[tuple[str, str, str]]) -> None:
    """Rewrite ``out`` without the rows of these (candidate, backend, problem) judgements, and without cut-off
    lines. A row's problem is `row_problem`'s: a job judged again passes its ``problem_ref`` and `legacy_ref` of
    its problem's key, so a row from before ``problem_ref`` is replaced too.

    A file verified again (its row was an ``error``, or its content changed) gets one new row per problem, never
    a second one beside the old; its ``error`` rows go whatever problem they name. The rewrite goes through a temporary file, so a kill leaves the old file.
    """
    if not judged or not out.is_file():
        return
    files = {(c, b) for c, b, _ in judged}
    kept = []
    for line in out.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict):
            continue
        file = (str(row.get("candidate")), row.get("backend", ""))
        # An error row is no verdict: one of a problem since found or corrected goes once the file is judged again.
        if (*file, row_problem(row)) not in judged and not (row.get("state") == ERROR_STATE and file in files):
            kept.append(line + "\n")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(kept))
    tmp.replace(out)
