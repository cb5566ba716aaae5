"""Loading many problems: a KernelBench-layout directory, the built-in suite, a name or a path."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Iterable

from ..precision import PRECISIONS
from .problem import Problem, ProblemError, load_problem_file

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
log = logging.getLogger(__name__)


def parse_ids(spec: str | int | Iterable[Any] | None, what: str = "problem id") -> set[int] | None:
    """``"1-5,19"`` -> {1, 2, 3, 4, 5, 19}; None or ``"all"`` means every id (``what``: the error's word)."""
    if spec is None:
        return None
    if isinstance(spec, int):
        return {spec}
    if not isinstance(spec, str):
        out: set[int] = set()
        for item in spec:
            out |= parse_ids(item, what) or set()
        return out
    spec = spec.strip()
    if spec in ("", "all", "*"):
        return None
    out = set()
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
        if m:
            out.update(range(int(m.group(1)), int(m.group(2)) + 1))
        elif part.isdigit():
            out.add(int(part))
        else:
            raise ProblemError(f"bad {what} selection {spec!r}: use numbers and ranges like 1-5,19")
    return out


def _levels(spec: Any) -> set[int] | None:
    return parse_ids(spec, "level")


def kernelbench_root(root: str | Path) -> Path:
    """Accept a KernelBench checkout or its inner ``KernelBench/`` folder; return the folder with level dirs."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ProblemError(f"{root}: no such directory")
    for candidate in (root, root / "KernelBench"):
        if any(candidate.glob("level[0-9]*")):
            return candidate
    raise ProblemError(f"{root}: not a KernelBench layout (expected level1/, level2/, ... holding N_Name.py files)")


def load_directory(root: str | Path, *, levels: Any = None, ids: Any = None, names: Iterable[str] | None = None,
                   size: str | None = None, overrides: dict[str, Any] | None = None,
                   origin: str = "kernelbench") -> list[Problem]:
    """Load ``root/levelN/ID_Name.py`` files, filtered by level, id and name, sorted by (level, id); or, where
    ``root`` has no level folders, the problem files directly in it (of no level).

    Size overrides apply to the selected problems only (a constant one problem lacks is an error). A file that does
    not load (a syntax error, no ``Model``) is skipped with a warning naming it, where others load and none was
    asked for by name or given sizes: one broken file among a folder's hundred ended every listing and job.
    """
    want_levels, want_ids = _levels(levels), parse_ids(ids)
    wanted = [n for n in (names or [])]
    problems, broken = [], []
    for level, level_dir in _level_dirs(root):
        if want_levels is not None and level not in want_levels:
            continue
        for f in level_dir.glob("*.py"):
            if f.name.startswith("_"):
                continue
            m = re.match(r"^(\d+)_", f.name)
            if want_ids is not None and (not m or int(m.group(1)) not in want_ids):
                continue
            if wanted and not any(_matches_stem(level, f.stem, n) for n in wanted):
                continue
            try:
                problems.append(load_problem_file(f, size=size, overrides=overrides, level=level, origin=origin))
            except ProblemError as exc:
                if wanted or overrides:
                    raise
                broken.append(exc)
    if broken and not problems:
        raise broken[0]
    for exc in broken:
        log.warning("kforge: %s; skipped, the other %d problem(s) load", str(exc).splitlines()[0], len(problems))
    problems.sort(key=lambda p: (p.level or 0, p.problem_id if p.problem_id is not None else 1 << 30, p.name))
    unknown = [n for n in wanted if not any(_matches(p, n) for p in problems)]
    if unknown:
        raise ProblemError(f"{root}: no problem named {', '.join(unknown)} (with levels={levels!r} ids={ids!r})")
    if not problems:
        raise ProblemError(f"{root}: no problems match levels={levels!r} ids={ids!r}")
    return problems


def _level_dirs(root: str | Path) -> list[tuple[int | None, Path]]:
    """(level, folder) of each ``levelN/`` in a KernelBench layout; a folder of problem files alone is one level
    folder (``KernelBench/level1`` itself), or of no level (a user's own problems, kept flat)."""
    path = Path(root).expanduser()
    if path.is_dir() and not any(path.glob("level[0-9]*")) and not any((path / "KernelBench").glob("level[0-9]*")) \
            and any(f for f in path.glob("*.py") if not f.name.startswith("_")):
        return [(int(path.name[5:]) if re.fullmatch(r"level\d+", path.name) else None, path)]
    base = kernelbench_root(root)
    return [(int(re.sub(r"\D", "", d.name)), d)
            for d in sorted(base.glob("level[0-9]*"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0))]


def load_builtin(*, levels: Any = None, ids: Any = None, names: Iterable[str] | None = None,
                 size: str | None = None, overrides: dict[str, Any] | None = None) -> list[Problem]:
    """The built-in suite (``kforge/problems/builtin``), optionally filtered."""
    try:
        return load_directory(BUILTIN_DIR, levels=levels, ids=ids, names=names, size=size, overrides=overrides,
                              origin="builtin")
    except ProblemError as exc:
        if names and "no problem named" in str(exc):
            have = ", ".join(p.key for p in load_directory(BUILTIN_DIR, origin="builtin"))
            raise ProblemError(f"no built-in problem named {', '.join(names)} (have: {have})") from None
        raise


def _matches_stem(level: int | None, stem: str, spec: str) -> bool:
    s = spec.strip().removesuffix(".py").lower()
    key = f"level{level}/{stem}".lower() if level is not None else stem.lower()
    return s in (key, stem.lower(), stem.split("_", 1)[-1].lower())


def _matches(problem: Problem, spec: str) -> bool:
    return _matches_stem(problem.level, problem.name, spec)


def resolve_problem(spec: str, *, size: str | None = None, overrides: dict[str, Any] | None = None) -> Problem:
    """A path to a problem file, or the name of a built-in problem (``level1/1_ReLU``, ``1_ReLU``, ``ReLU``)."""
    path = Path(spec).expanduser()
    if path.suffix == ".py" or path.exists() or "/" in spec and not _looks_builtin(spec):
        if path.is_dir():
            raise ProblemError(f"{spec}: is a directory; name a problem file, or use `kforge problems --dir`")
        return load_problem_file(path, size=size, overrides=overrides)
    found = [p for p in load_builtin(size=size, overrides=None) if _matches(p, spec)]
    if not found:
        raise ProblemError(f"{spec}: no such file, and no built-in problem of that name (see `kforge problems`)")
    if len(found) > 1:
        raise ProblemError(f"{spec}: ambiguous, matches {', '.join(p.key for p in found)}")
    p = found[0]
    return load_problem_file(p.path, size=size, overrides=overrides, level=p.level, origin="builtin")


def _looks_builtin(spec: str) -> bool:
    return bool(re.fullmatch(r"level\d+/[\w\-]+", spec.strip()))


#: The precisions a folder of hand-written solutions serves (its path under ``solutions/``; the backend's own
#: folder holds fp32). A folder not named here serves its own precision alone, and an fp32 folder tf32 too (float32
#: storage): an fp32-only kernel given bf16 inputs fails, so at a precision no folder serves, the oracle says it
#: has no solution instead of answering with one. Named here: kernels that take any float storage and compute
#: in fp32 (the cpu and Triton forward files), and Triton's tensor-core kernels, which take both half types
#: (`tl.dot` on the operands as loaded). cuda's bf16 kernels check for bf16 and serve it alone.
SERVES: dict[str, frozenset[str]] = {
    "cpu": frozenset({"fp32", "tf32", "bf16", "fp16"}),
    "triton": frozenset({"fp32", "tf32", "bf16", "fp16"}),
    "triton/bf16": frozenset({"bf16", "fp16"}),
}


def _serves(folder: str, precision: str) -> bool:
    name = folder.rsplit("/", 1)[-1]
    own = {"tf32", "fp32"} if name not in PRECISIONS else {name}  # the backend's folder (or backward/) is fp32
    return precision in SERVES.get(folder, own)


def solution_dirs(backend: str, precision: str = "fp32", backward: bool = False) -> list[Path]:
    """Where a backend's hand-written solutions are looked for, first match first, among the folders that serve
    the precision (`SERVES`): the precision's own (e.g. bf16 tensor-core kernels), another reduced precision's
    whose kernels take it too, then the backend's; for a training step (``verify.backward``) the same under
    ``backward/`` (a forward-only solution has no gradients, so it is never the answer there). Each holds
    ``level<N>/<name>.py``."""
    if precision not in PRECISIONS:
        raise ProblemError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    base = backend + ("/backward" if backward else "")
    order = [f"{base}/{precision}"] + [f"{base}/{p}" for p in ("bf16", "fp16") if p != precision] + [base]
    return [BUILTIN_DIR / "solutions" / folder for folder in order if _serves(folder, precision)]


def builtin_solution_path(problem: Problem, backend: str, precision: str = "fp32",
                          backward: bool = False) -> Path | None:
    """The hand-written solution of a built-in problem for a backend at a precision (the `oracle` model's answer),
    for the forward alone or, with ``backward``, for a training step: ``solutions/<backend>[/backward]/<precision>/
    levelN/<name>.py``, else the first folder of `solution_dirs` that has the file; None where no folder that
    serves the precision does."""
    if problem.level is None:
        return None
    for folder in solution_dirs(backend, precision, backward):
        p = folder / f"level{problem.level}" / f"{problem.name}.py"
        if p.is_file():
            return p
    return None
