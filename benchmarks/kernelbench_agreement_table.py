"""The pure half of `kernelbench_agreement.py`: its manifest, what each harness's record says, the join.

Nothing here touches a GPU, torch or KernelBench (of kforge, only `kforge.manifest`): it reads a manifest,
turns a record of KernelBench's ``eval_kernel_against_ref`` (as the agreement script's child process writes
it) and a ``kforge eval`` JSONL row into verdicts, joins them per candidate and renders the table (text,
markdown, CSV).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kforge.manifest import manifest_rows  # noqa: E402  (torch-free: the package's root and this module only)

#: KernelBench's error classes, as this table names them ("" for a correct candidate).
COMPILE, RUNTIME, MISMATCH, TIMEOUT, CRASH, ERROR = "compile", "runtime", "mismatch", "timeout", "crash", "error"
#: The backends both harnesses take a candidate in: a CUDA extension built by ``load_inline``, or Triton kernels
#: (KernelBench imports a Triton candidate from a file of its own, as ``@triton.jit`` needs the source).
BACKENDS = ("cuda", "triton")
#: The precisions KernelBench's ``eval_kernel_against_ref`` takes (its ``precision`` dtype) and ``kforge eval`` too.
PRECISIONS = ("fp32", "bf16", "fp16")


class AgreementInputError(ValueError):
    """A manifest or folder that cannot be used at all (exit status 2)."""


@dataclass(frozen=True)
class Entry:
    """One manifest row: a candidate, the problem it was written for, and where it came from."""

    key: str
    """Stable id (file-name safe): names its build folder and joins the two harnesses' records."""
    name: str
    """The candidate as the manifest wrote it (shown in the table)."""
    problem: Path
    """The reference program (absolute)."""
    candidate: Path
    """The candidate program (absolute)."""
    source: str
    """Where it came from (the manifest's ``source`` column, else the candidate's folder name)."""
    backend: str = "cuda"
    """How both harnesses load it: ``cuda`` or ``triton`` (the manifest's ``backend`` column, else ``--backend``)."""


def entry_key(name: str, problem: Path) -> str:
    """``cuda_l1/level1_p3.py`` + its problem -> ``cuda_l1_level1_p3-1a2b3c4d``."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(Path(name).with_suffix(""))).strip("_.") or "candidate"
    digest = hashlib.sha256(f"{problem}\0{name}".encode()).hexdigest()[:8]
    return f"{stem}-{digest}"


def read_manifest(path: str | Path, kernelbench: str | Path, backend: str = "cuda") -> list[Entry]:
    """Entries of a CSV (header row) or JSONL manifest of ``problem,candidate[,source][,backend]``.

    A relative problem is looked up in the KernelBench checkout first, then beside the manifest; a
    relative candidate is taken from the manifest's folder; a row without a backend takes ``backend``.
    Missing files, an unknown backend and a candidate listed twice are errors: each row must be one
    candidate the two harnesses can both be given.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise AgreementInputError(f"{path}: no such manifest file")
    root = Path(kernelbench).expanduser()
    entries: list[Entry] = []
    seen: dict[Path, int] = {}
    for n, rec in manifest_rows(p, AgreementInputError, "problem,candidate[,source][,backend]"):
        prob, cand = rec.get("problem", ""), rec.get("candidate", "")
        if not prob or not cand:
            raise AgreementInputError(f"{path}:{n}: every row needs a problem and a candidate")
        tried = [Path(prob)] if Path(prob).is_absolute() else [root / prob, p.parent / prob]
        problem = next((t for t in tried if t.is_file()), None)
        if problem is None:
            raise AgreementInputError(f"{path}:{n}: problem {prob} is not a file "
                                      f"(looked for {' and '.join(str(t) for t in tried)})")
        candidate = Path(cand) if Path(cand).is_absolute() else p.parent / cand
        if not candidate.is_file():
            raise AgreementInputError(f"{path}:{n}: candidate {candidate} is not a file")
        candidate = candidate.resolve()
        if candidate in seen:
            raise AgreementInputError(f"{path}:{n}: candidate {cand} is listed twice (first on line {seen[candidate]})")
        seen[candidate] = n
        row_backend = rec.get("backend") or backend
        if row_backend not in BACKENDS:
            raise AgreementInputError(f"{path}:{n}: backend {row_backend!r} is neither of {', '.join(BACKENDS)}")
        problem = problem.resolve()
        entries.append(Entry(entry_key(cand, problem), cand, problem, candidate,
                             rec.get("source") or candidate.parent.name, row_backend))
    if not entries:
        raise AgreementInputError(f"{path}: the manifest lists no candidates")
    return entries


def write_kforge_manifest(entries: Iterable[Entry], path: Path) -> Path:
    """The manifest handed to ``kforge eval --manifest``: absolute paths and each entry's backend."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["problem", "candidate", "backend"])
        for e in entries:
            w.writerow([str(e.problem), str(e.candidate), e.backend])
    return path


def read_jsonl(path: Path, key: str) -> dict[str, dict[str, Any]]:
    """Rows of a JSONL file by ``row[key]`` (the last one wins; a line cut off by a kill is skipped)."""
    rows: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return rows
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get(key) is not None:
            rows[str(row[key])] = row
    return rows


@dataclass
class KernelBenchVerdict:
    """What KernelBench's ``eval_kernel_against_ref`` (or the process around it) decided."""

    correct: bool
    error_class: str
    """"" when correct, else compile, runtime, mismatch, timeout, crash or error."""
    message: str = ""
    runtime_ms: float | None = None
    ref_runtime_ms: float | None = None

    @property
    def speedup(self) -> float | None:
        if self.correct and self.runtime_ms and self.ref_runtime_ms and self.runtime_ms > 0 and self.ref_runtime_ms > 0:
            return self.ref_runtime_ms / self.runtime_ms
        return None

    @property
    def label(self) -> str:
        return "correct" if self.correct else f"not correct ({self.error_class})"


def _first(meta: dict[str, Any], *names: str) -> str:
    for n in names:
        if meta.get(n) not in (None, "", []):
            return str(meta[n])
    return ""


def _ms(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def classify_kernelbench(rec: dict[str, Any]) -> KernelBenchVerdict:
    """A child's record -> KernelBench's verdict and its error class.

    ``status`` is how the child ended: ``result`` (``eval_kernel_against_ref`` returned, or raised and
    was recorded as KernelBench's ``evaluate_single_sample`` records it: ``compiled=False`` with
    ``cuda_error`` or ``other_error``), ``none`` (it returned None: a lock-file error, retried once),
    ``timeout`` or ``crash`` (KernelBench's batch loop records both as not compiled, not correct).
    """
    status = rec.get("status")
    if status == "timeout":
        return KernelBenchVerdict(False, TIMEOUT, str(rec.get("error") or "timed out"))
    if status == "crash":
        return KernelBenchVerdict(False, CRASH, str(rec.get("error") or "the process died without a result"))
    if status != "result":
        return KernelBenchVerdict(False, ERROR, str(rec.get("error") or f"no result ({status})"))
    meta = rec.get("metadata") or {}
    runtime, ref = _ms(rec.get("runtime")), _ms(rec.get("ref_runtime"))
    if rec.get("compiled") and rec.get("correctness"):
        return KernelBenchVerdict(True, "", _first(meta, "correctness_trials"), runtime, ref)
    if _first(meta, "compilation_error", "compilation_error_name"):
        cls, msg = COMPILE, _first(meta, "compilation_error", "compilation_error_name")
    elif _first(meta, "runtime_error", "cuda_error", "other_error", "runtime_error_name"):
        cls, msg = RUNTIME, _first(meta, "runtime_error", "cuda_error", "other_error", "runtime_error_name")
    elif rec.get("compiled"):
        issue = _first(meta, "correctness_issue") or "outputs differ"
        diff = meta.get("max_difference")
        cls, msg = MISMATCH, f"{issue}; max difference {', '.join(map(str, diff))}" if diff else issue
    else:
        cls, msg = COMPILE, "not compiled (no message)"
    return KernelBenchVerdict(False, cls, msg, runtime, ref)


@dataclass
class KforgeVerdict:
    """A ``kforge eval`` row: its state under the rules it ran with, and under kforge's own."""

    state: str
    kforge_state: str | None
    speedup: float | None
    message: str = ""

    @property
    def correct(self) -> bool:
        return self.state == "correct"


def classify_kforge(row: dict[str, Any]) -> KforgeVerdict:
    states = row.get("states") if isinstance(row.get("states"), dict) else {}
    rule, msg = row.get("rule") or "", row.get("message") or row.get("error") or ""
    text = f"{rule}: {msg}" if rule and msg else str(rule or msg)
    speed = row.get("speedup_eager")
    return KforgeVerdict(str(row.get("state") or "error"), states.get("kforge"),
                         float(speed) if isinstance(speed, (int, float)) else None, " ".join(text.split()))


@dataclass
class AgreementRow:
    entry: Entry
    kernelbench: KernelBenchVerdict | None
    kforge: KforgeVerdict | None

    @property
    def agree(self) -> bool | None:
        """Whether kforge (under kernelbench rules) calls it correct exactly when KernelBench does."""
        if self.kernelbench is None or self.kforge is None:
            return None
        return self.kernelbench.correct == self.kforge.correct


def join(entries: Iterable[Entry], kernelbench: dict[str, dict[str, Any]],
         kforge: dict[str, dict[str, Any]]) -> list[AgreementRow]:
    """A row per entry: KernelBench's record by the entry's key, kforge's row by the candidate's path."""
    rows = []
    for e in entries:
        kb, kf = kernelbench.get(e.key), kforge.get(str(e.candidate))
        rows.append(AgreementRow(e, classify_kernelbench(kb) if kb else None, classify_kforge(kf) if kf else None))
    return rows


@dataclass
class Summary:
    compared: int
    agreed: int
    disagreements: list[AgreementRow] = field(default_factory=list)
    pending: list[AgreementRow] = field(default_factory=list)
    """Rows one harness has not answered yet (a run cut off; rerun with the same --out)."""
    both_correct: int = 0
    both_not: int = 0
    precision: str = "fp32"
    """The precision both harnesses judged at (KernelBench's ``precision``, ``kforge eval --precision``)."""
    by_source: dict[str, list[int]] = field(default_factory=dict)
    """Per source: [candidates, compared, agreed]."""


def summarize(rows: list[AgreementRow], precision: str = "fp32") -> Summary:
    s = Summary(0, 0, precision=precision)
    for r in rows:
        counts = s.by_source.setdefault(r.entry.source, [0, 0, 0])
        counts[0] += 1
        if r.agree is None:
            s.pending.append(r)
            continue
        s.compared += 1
        counts[1] += 1
        if r.agree:
            s.agreed += 1
            counts[2] += 1
            s.both_correct += r.kernelbench.correct
            s.both_not += not r.kernelbench.correct
        else:
            s.disagreements.append(r)
    return s


COLUMNS = ("candidate", "source", "backend", "kernelbench", "kb_error", "kforge_kernelbench", "kforge_kforge",
           "kb_speedup", "kforge_speedup", "agree")


def _speed(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else ""


def cells(r: AgreementRow) -> dict[str, str]:
    kb, kf = r.kernelbench, r.kforge
    return {"candidate": r.entry.name, "source": r.entry.source, "backend": r.entry.backend,
            "kernelbench": ("correct" if kb.correct else "not correct") if kb else "pending",
            "kb_error": kb.error_class if kb else "",
            "kforge_kernelbench": kf.state if kf else "pending",
            "kforge_kforge": (kf.kforge_state or "?") if kf else "pending",
            "kb_speedup": _speed(kb.speedup) if kb else "", "kforge_speedup": _speed(kf.speedup) if kf else "",
            "agree": {True: "yes", False: "NO", None: ""}[r.agree]}


def render_text(rows: list[AgreementRow]) -> str:
    table = [dict(zip(COLUMNS, COLUMNS))] + [cells(r) for r in rows]
    widths = {c: max(len(t[c]) for t in table) for c in COLUMNS}
    return "\n".join("  ".join(t[c].ljust(widths[c]) for c in COLUMNS).rstrip() for t in table)


def render_csv(rows: list[AgreementRow], precision: str = "fp32") -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[*COLUMNS, "precision", "kb_message", "kforge_message"], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**cells(r), "precision": precision, "kb_message": r.kernelbench.message if r.kernelbench else "",
                    "kforge_message": r.kforge.message if r.kforge else ""})
    return buf.getvalue()


def _md(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summary_lines(s: Summary) -> list[str]:
    lines = [f"agreement at {s.precision}: {s.agreed}/{s.compared} candidates "
             f"({s.both_correct} correct in both, {s.both_not} not correct in both); "
             f"{len(s.disagreements)} disagree; {len(s.pending)} pending"]
    lines += [f"  {src}: {agreed}/{compared} agree of {n} candidates"
              for src, (n, compared, agreed) in s.by_source.items()]
    for r in s.disagreements:
        lines.append(f"  DISAGREE {r.entry.name} [{r.entry.source}]: KernelBench {r.kernelbench.label}"
                     f"{' - ' + _md(r.kernelbench.message, 200) if r.kernelbench.message else ''}; "
                     f"kforge (kernelbench rules) {r.kforge.state}"
                     f"{' - ' + _md(r.kforge.message, 200) if r.kforge.message else ''}")
    for r in s.pending:
        missing = [n for n, v in (("KernelBench", r.kernelbench), ("kforge", r.kforge)) if v is None]
        lines.append(f"  pending {r.entry.name}: no {' or '.join(missing)} verdict yet")
    return lines


def render_markdown(rows: list[AgreementRow], s: Summary) -> str:
    out = [f"# KernelBench's harness vs kforge under `--rules kernelbench`, precision {s.precision}", "",
           "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(_md(v) for v in cells(r).values()) + " |" for r in rows]
    head = summary_lines(s)[:1 + len(s.by_source)]
    out += ["", head[0], "", *("- " + line.strip() for line in head[1:]), ""]
    if s.disagreements:
        out += ["## Disagreements", "",
                "| candidate | source | KernelBench | kforge (kernelbench rules) | kforge (kforge rules) |",
                "|---|---|---|---|---|"]
        out += [f"| {_md(r.entry.name)} | {_md(r.entry.source)} "
                f"| {_md(r.kernelbench.label + ': ' + r.kernelbench.message)} "
                f"| {_md(r.kforge.state + ': ' + r.kforge.message)} | {_md(r.kforge.kforge_state or '?')} |"
                for r in s.disagreements]
    return "\n".join(out) + "\n"
