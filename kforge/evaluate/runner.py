"""`kforge eval`: verify many candidate files in one worker pool, one JSONL row each, resumable.

Inputs are KernelBench's generations layout (`discover`) or a manifest (`read_manifest`); both become
`CandidateFile`s (``jobs``). `run_eval` loads each problem once, skips what the results file already holds,
verifies the rest from several threads (builds go to the pool's build workers in parallel, runs to any free
device slot) and appends a row per candidate as it finishes (the main thread alone writes). A file keeps one
row per problem it is judged against: one verified again (an ``error`` row, or changed content) loses its old row
first (`kforge.evaluate.rows`). The summary lives in `kforge.evaluate.summary`.
"""

from __future__ import annotations

import contextlib
import json
import re
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from tqdm import tqdm

from ..candidate import Candidate
from ..errors import KforgeError
from ..manifest import manifest_rows
from ..problems import Problem, ProblemError, kernelbench_root, parse_ids, resolve_problem
from .judged import judged_under, resume_conflict
from .rows import drop_rows, file_hash, legacy_ref, load_results, problem_ref, resume_key
from .summary import ERROR_STATE

#: The file names KernelBench's scripts/generate_samples.py writes into a run directory.
GENERATION_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_TRIM = 2000  # characters kept of each evidence text (compiler log, traceback, output tail)


class EvalInputError(KforgeError, ValueError):
    """Inputs that cannot be evaluated at all (a missing directory, a malformed manifest): a usage error."""


@dataclass(frozen=True)
class CandidateFile:
    """One candidate file to verify against one problem on one backend (one of `run_eval`'s ``jobs``; not a
    synthesis job, `kforge.job.pipeline`)."""

    candidate: Path
    """The candidate program (.py) or a saved reply (.md/.txt)."""
    problem: str | None
    """A problem file path or a built-in name; None when no problem matches (see ``error``)."""
    backend: str
    """Backend name (cpu, cuda, triton)."""
    level: int | None = None
    """KernelBench level, from the file name or the problem."""
    problem_id: int | None = None
    """KernelBench problem id, from the file name or the problem."""
    sample_id: int | None = None
    """Sample number from a KernelBench file name (None for manifest rows named otherwise)."""
    error: str | None = None
    """Why this file cannot be verified, found while discovering it (e.g. its problem is missing)."""


@dataclass
class Discovery:
    """What a generations directory holds."""

    jobs: list[CandidateFile]
    """A file per ``level_L_problem_ID_sample_S_kernel.py`` file, sorted by (level, id, sample)."""
    ignored: list[str] = field(default_factory=list)
    """Names of other ``.py`` files in the directory (not in KernelBench's naming)."""


def parse_generation_name(name: str) -> tuple[int, int, int] | None:
    """``level_1_problem_19_sample_0_kernel.py`` -> (1, 19, 0); None for any other name."""
    m = GENERATION_NAME.match(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def index_problems(problems_dir: str | Path) -> dict[tuple[int, int], list[Path]]:
    """Map (level, id) to the ``levelL/ID_*.py`` files of a KernelBench tree (several only if it is malformed)."""
    base = kernelbench_root(problems_dir)
    out: dict[tuple[int, int], list[Path]] = {}
    for level_dir in base.glob("level[0-9]*"):
        m = re.fullmatch(r"level(\d+)", level_dir.name)
        if not m or not level_dir.is_dir():
            continue
        for f in sorted(level_dir.glob("*.py")):
            pm = re.match(r"^(\d+)_", f.name)
            if pm:
                out.setdefault((int(m.group(1)), int(pm.group(1))), []).append(f)
    return out


def _kernelbench_named_first(f: Path) -> tuple[bool, str]:
    """Files in KernelBench's own spelling of their numbers first: of two naming one sample, that one is judged."""
    parsed = parse_generation_name(f.name)
    return (parsed is not None and f.name != "level_{}_problem_{}_sample_{}_kernel.py".format(*parsed), f.name)


def discover(problems_dir: str | Path, generations_dir: str | Path, backend: str,
             levels: Any = None, ids: Any = None) -> Discovery:
    """Jobs for the KernelBench-named files in ``generations_dir``, matched to ``problems_dir``."""
    gen = Path(generations_dir).expanduser()
    if not gen.is_dir():
        raise EvalInputError(f"{generations_dir}: no such generations directory")
    try:
        problems = index_problems(problems_dir)
    except ProblemError as exc:
        raise EvalInputError(str(exc)) from None
    try:
        want_levels, want_ids = parse_ids(levels, "level"), parse_ids(ids)
    except ProblemError as exc:
        raise EvalInputError(str(exc)) from None
    jobs, ignored, seen = [], [], {}
    for f in sorted(gen.iterdir(), key=_kernelbench_named_first):
        parsed = parse_generation_name(f.name)
        if parsed is None:
            if f.suffix == ".py":
                ignored.append(f.name)
            continue
        level, pid, sample = parsed
        if (want_levels is not None and level not in want_levels) or (want_ids is not None and pid not in want_ids):
            continue
        matches = problems.get((level, pid), [])
        error = None
        if not matches:
            error = f"no problem level{level}/{pid}_*.py in {problems_dir}"
        elif len(matches) > 1:
            error = f"several problem files match level{level}/{pid}_*.py: {', '.join(p.name for p in matches)}"
        if not f.is_file():  # named as a sample, but nothing to read: a row says so (it was "not named" so)
            error = "not a file that can be read (a folder, or a link to nothing)"
        if (level, pid, sample) in seen:  # level_01_problem_1 and level_1_problem_1: one sample, counted once
            error = f"the same sample as {seen[(level, pid, sample)]} (its numbers written otherwise); judged there"
        seen.setdefault((level, pid, sample), f.name)
        where = f.resolve() if f.is_file() else f.absolute()  # a link to nothing: its own name, not its target's
        jobs.append(CandidateFile(where, str(matches[0]) if len(matches) == 1 else None, backend, level, pid, sample,
                                  error))
    if not jobs:
        hint = " (point at one run's folder, not at runs/)" if any(p.is_dir() for p in gen.iterdir()) else ""
        raise EvalInputError(f"{generations_dir}: no level_L_problem_ID_sample_S_kernel.py files"
                             f"{' for the selected levels/ids' if levels or ids else ''}{hint}")
    jobs.sort(key=lambda j: (j.level, j.problem_id, j.sample_id))
    return Discovery(jobs, ignored)


def read_manifest(path: str | Path, backend: str) -> list[CandidateFile]:
    """Jobs from a CSV (header row) or JSONL manifest with ``problem``, ``candidate`` and optional ``backend``.

    Relative paths are taken from the manifest's folder; a problem that names no file there is kept as
    given (a built-in name, or a path `resolve_problem` reports on).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise EvalInputError(f"{path}: no such manifest file")
    records = manifest_rows(p, EvalInputError, "problem,candidate[,backend]")
    jobs = []
    for n, rec in records:
        prob, cand = str(rec.get("problem") or "").strip(), str(rec.get("candidate") or "").strip()
        if not prob or not cand:
            raise EvalInputError(f"{path}:{n}: every row needs a problem and a candidate")
        cpath = Path(cand).expanduser()
        cpath = cpath if cpath.is_absolute() else p.parent / cpath
        local = p.parent / prob
        if not Path(prob).is_absolute() and local.exists():
            prob = str(local)
        parsed = parse_generation_name(cpath.name)
        jobs.append(CandidateFile(cpath.resolve(), prob, str(rec.get("backend") or backend).strip(),
                        sample_id=parsed[2] if parsed else None))
    if not jobs:
        raise EvalInputError(f"{path}: the manifest lists no candidates")
    return jobs


def read_candidate(path: Path) -> Candidate:
    """A program (.py defining ModelNew), or a model's reply (.md/.txt, or any text with fenced code)."""
    text = path.read_text(errors="replace")
    if path.suffix in (".md", ".txt") or "```" in text:
        return Candidate.from_reply(text)
    return Candidate.from_source(text)


def _trim(value: Any) -> Any:
    return value[-_TRIM:] if isinstance(value, str) and len(value) > _TRIM else value


def make_row(job: CandidateFile, content_hash: str | None, size: str, problem: Problem | None = None,
             verdict: dict[str, Any] | None = None, error: str | None = None) -> dict[str, Any]:
    """A results row: where the candidate came from, then the verdict's fields (evidence trimmed)."""
    row: dict[str, Any] = {
        "candidate": str(job.candidate), "candidate_hash": content_hash,
        "problem": problem.key if problem else job.problem, "problem_ref": problem_ref(job.problem),
        "level": problem.level if problem and problem.level is not None else job.level,
        "problem_id": problem.problem_id if problem and problem.problem_id is not None else job.problem_id,
        "sample_id": job.sample_id, "backend": job.backend, "size": problem.size if problem else size}
    if verdict is None:
        row.update(state=ERROR_STATE, correct=False, error=error, message=error or "")
        return row
    v = dict(verdict)
    v.pop("problem", None)
    v.pop("backend", None)
    v["evidence"] = {k: _trim(x) for k, x in (v.get("evidence") or {}).items()}
    row.update(v)
    # Fields the verifier may or may not report yet: always present in rows, None/[] when absent.
    row["kernel_share"] = v.get("kernel_share")
    row["problem_flags"] = list(v.get("problem_flags") or [])
    row["error"] = None
    return row


@dataclass
class EvalResult:
    """Rows for every job (resumed ones included) and how many were verified in this run."""

    rows: list[dict[str, Any]]
    verified: int
    resumed: int


def _problem(problems: dict, name: str, size: str) -> "Problem | ProblemError":
    """A job's problem, loaded once per name and size (a problem that does not load: its error)."""
    if (name, size) not in problems:
        try:
            problems[(name, size)] = resolve_problem(name, size=size)
        except ProblemError as exc:
            problems[(name, size)] = exc
    return problems[(name, size)]


def _resumed(done: dict, job: CandidateFile, h: str | None, load: Callable[[], "Problem | ProblemError"]):
    """The verdict row a job takes over from an earlier run, None when it is judged (again): the row of this file,
    content, backend and problem; or a row written before rows recorded ``problem_ref`` whose problem has the
    key of the job's (loaded to tell: its file name may not say which)."""
    old = done.get(resume_key(job.candidate, h, job.backend, problem_ref(job.problem)))
    if old is None and h is not None and not job.error:
        problem = load()
        if not isinstance(problem, ProblemError):
            old = done.get(resume_key(job.candidate, h, job.backend, legacy_ref(problem.key)))
    return old if old is not None and old.get("state") != ERROR_STATE else None


@contextlib.contextmanager
def _appending(out: Path):
    """The rows file open for appending, after a newline if the last run was cut off mid-line."""
    with open(out, "a+b") as fh:
        end = fh.seek(0, 2)
        if end:
            fh.seek(end - 1)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        yield fh


def _verified_row(verifier, backend, config, job: CandidateFile, h: str | None, problem: Problem, cand: Candidate):
    """One file's row: its verdict, or why it could not be verified (nothing a candidate does raises here)."""
    try:
        return make_row(job, h, problem.size, problem, verifier.verify(problem, cand, backend, config).to_dict())
    except ProblemError as exc:  # the problem's own failure, with its traceback: no candidate is judged
        return make_row(job, h, problem.size, problem, error=f"the problem fails: {exc}")
    except Exception as exc:  # noqa: BLE001 - a verifier fault on one file must not end the evaluation
        tail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return make_row(job, h, problem.size, problem, error=f"verification failed: {tail}")


def run_eval(jobs: Iterable[CandidateFile], verifier, backends: dict[str, Any], *, size_of: Callable[[str], str],
             out: Path, config=None, threads: int = 4, progress: bool | None = None,
             on_row: Callable[[dict[str, Any], str | None], None] | None = None) -> EvalResult:
    """Verify every job not already in ``out`` and append its row there as soon as it is known.

    ``backends`` maps backend names to `Backend` objects; ``size_of`` gives the size preset for a backend
    name; ``on_row(row, text)`` sees each row with the file's text (MLflow logging). ``progress`` None shows a bar on a
    terminal only. Nothing a candidate does raises here: it becomes a row.
    """
    jobs = list(jobs)
    done = load_results(out)
    cfg = config or verifier.config
    if conflict := resume_conflict(out, done, cfg, size_of, backends):
        raise EvalInputError(conflict)
    problems: dict[tuple[str, str], Problem | ProblemError] = {}  # each problem loaded once per size
    rows: dict[int, dict[str, Any]] = {}
    todo: list[tuple[int, CandidateFile, str | None, Problem, Candidate]] = []
    texts: dict[int, str | None] = {}  # each file as read, for on_row (a garbage file's too)
    fresh: list[tuple[int, dict[str, Any], str | None]] = []
    resumed: list[tuple[int, dict[str, Any], str | None]] = []
    for i, job in enumerate(jobs):
        h = file_hash(job.candidate)
        texts[i] = job.candidate.read_text(errors="replace") if h is not None else None
        old = _resumed(done, job, h, lambda: _problem(problems, job.problem or "", size_of(job.backend)))
        if old is not None:
            rows[i] = old
            resumed.append((i, old, texts[i]))
            continue
        size = size_of(job.backend)
        if job.error:
            fresh.append((i, make_row(job, h, size, error=job.error), texts[i]))
            continue
        if h is None:
            fresh.append((i, make_row(job, h, size, error="no such candidate file"), None))
            continue
        problem = _problem(problems, job.problem or "", size)
        if isinstance(problem, ProblemError):
            fresh.append((i, make_row(job, h, size, error=f"the problem does not load: {problem}"), texts[i]))
            continue
        job = replace(job, level=problem.level, problem_id=problem.problem_id)
        todo.append((i, job, h, problem, read_candidate(job.candidate)))

    drop_rows(out, {(str(job.candidate), job.backend, ref) for _, job, _, problem, _ in todo
                    for ref in (problem_ref(job.problem), legacy_ref(problem.key))}
              | {(row["candidate"], row["backend"], ref) for _, row, _ in fresh
                 for ref in (row["problem_ref"], legacy_ref(str(row["problem"] or "")))})
    for _, row, source in (resumed if on_row is not None else ()):  # a logged run holds the resumed rows too
        on_row(row, source)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _appending(out) as fh:

        def record(i: int, row: dict[str, Any], source: str | None) -> None:
            # The size asked for, not the problem's own (``default`` for a file without presets): a rerun asks again.
            row["judged"] = judged_under(cfg, size_of(row["backend"]))
            fh.write((json.dumps(row, default=str) + "\n").encode())
            fh.flush()
            rows[i] = row
            if on_row is not None:
                on_row(row, source)

        for i, row, source in fresh:
            record(i, row, source)

        def one(item):
            i, job, h, problem, cand = item
            return i, _verified_row(verifier, backends[job.backend], config, job, h, problem, cand), texts[i]

        needed = {job.backend: backends[job.backend] for _, job, _, _, cand in todo if cand.source is not None}
        boot = verifier.start_workers(*needed.values()) if needed else None
        bar = tqdm(total=len(todo), unit="cand", desc="kforge eval", disable=None if progress is None else not progress)
        states: dict[str, int] = {}
        ex = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="kforge-eval")
        try:
            futures = [ex.submit(one, item) for item in todo]
            for fut in as_completed(futures):
                i, row, source = fut.result()
                record(i, row, source)
                states[row["state"]] = states.get(row["state"], 0) + 1
                bar.set_postfix_str(" ".join(f"{k}={n}" for k, n in sorted(states.items())), refresh=False)
                bar.update(1)
        finally:
            ex.shutdown(wait=False, cancel_futures=True)
            bar.close()
            if boot is not None:
                boot.join()  # a worker it starts after the pool closes would outlive the evaluation
    return EvalResult([rows[i] for i in sorted(rows)], verified=len(todo), resumed=len(resumed))
