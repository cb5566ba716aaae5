"""Importing the trusted problem and the untrusted candidate inside a worker's child, as KernelBench's harness
does: the candidate's code runs in a fresh copy of the problem's namespace; and the problem's own traceback, told
under its own path."""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path


def import_file(path: str | Path, name: str, namespace_of: str | Path | None = None, shown: dict | None = None):
    """Import ``path`` as module ``name``; with ``namespace_of``, that file's code runs first in the same
    namespace (a fresh copy of it: the harness's own objects are never shared), and then ``shown`` is set over
    it (a shape variant's constants back at the values the candidate was shown)."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if namespace_of is not None:
        source = Path(namespace_of).read_text(encoding="utf-8")
        exec(compile(source, str(namespace_of), "exec"), module.__dict__)  # noqa: S102 - the trusted problem
        module.__dict__.update(shown or {})
    spec.loader.exec_module(module)
    return module


def import_candidate(path: str | Path = "candidate.py", problem: str | Path = "problem.py", shown: dict | None = None):
    """The candidate, in the problem's namespace, as KernelBench's harness runs it: the problem's source and
    then the candidate's execute in one globals dict, so a candidate may use the problem's module-level
    constants (``batch_size``, ...) without defining them, and any KernelBench generation that does is judged
    as KernelBench judges it. The problem's code runs anew in that namespace, so the reference model the
    harness built is never within the candidate's reach. ``shown``: see `import_file`."""
    return import_file(path, "kforge_candidate", namespace_of=problem if Path(problem).exists() else None,
                       shown=shown)


def problem_frames(exc: BaseException, shown_as: str, copy: str = "problem.py") -> str:
    """``exc``'s traceback from its first frame in the worker's ``copy`` of the problem on, that file named
    ``shown_as``; the exception alone where no frame is in it (a syntax error names the file and line itself; a
    check of kforge's, ``get_inputs() returned None``, says what is wrong, and kforge's frames are no help)."""
    te = traceback.TracebackException.from_exception(exc)
    here = os.path.abspath(copy)
    frames = list(te.stack)
    first = next((i for i, f in enumerate(frames) if os.path.abspath(f.filename) == here), None)
    te.stack = traceback.StackSummary.from_list(frames[first:] if first is not None else [])
    for f in te.stack:
        if os.path.abspath(f.filename) == here:
            f.filename = shown_as
    if isinstance(exc, SyntaxError) and te.filename and os.path.abspath(te.filename) == here:
        te.filename = shown_as
    return "".join(te.format())
