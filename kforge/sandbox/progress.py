"""What a child has established so far, and whether candidate code is running: reported as it goes, so a child
stopped at its time limit is judged from what it established rather than charged with the timeout.

The child writes progress records into its reply pipe (`connect`, called by the zygote before any handler or
candidate code runs), each carrying the request's nonce as the answer does (`kforge.sandbox.zygote`): candidate code
in the same process that writes into the pipe cannot make one, and the zygote reports any line without it as
forged. A handler reports milestones (`milestone`: a name and JSON data its own layer reads back, e.g.
`kforge.verify.protocol.RunProgress`) and marks the stretches in which candidate code runs (`candidate_code`), so
the caller can tell a candidate that hung from a harness that ran out of time in its own measuring. Outside a
zygote's child (tests, a plain import) reporting does nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

_write: Callable[[dict[str, Any]], None] | None = None
_inside = False
_since = 0.0
_longest = 0.0


def in_candidate() -> bool:
    """Whether candidate code is running now (inside `candidate_code`), as this process sees it."""
    return _inside


def running_s() -> float:
    """How long the candidate code running now has run (0 when none is)."""
    return time.monotonic() - _since if _inside else 0.0


def longest_s() -> float:
    """The longest stretch of candidate code that returned so far in this process."""
    return _longest


def connect(wfd: int, nonce: str | None) -> None:
    """Send this child's progress records into its reply pipe, tagged with the request's nonce."""
    global _write

    def write(record: dict[str, Any]) -> None:
        view = memoryview((json.dumps({"progress": record, "nonce": nonce}, default=str) + "\n").encode())
        while view:
            view = view[os.write(wfd, view):]
    _write = write


def milestone(name: str, data: Any) -> None:
    """What the handler has established under ``name`` (a later report of the same name replaces it)."""
    if _write is not None:
        _write({"milestones": {name: data}})


@contextlib.contextmanager
def candidate_code() -> Iterator[None]:
    """Marks a stretch in which candidate code runs (a call into the candidate and the wait for its device work)."""
    global _inside, _since, _longest
    outer, _inside = _inside, True
    if not outer:
        _since = time.monotonic()
        if _write is not None:
            _write({"in_candidate": True})
    try:
        yield
        if not outer:
            _longest = max(_longest, time.monotonic() - _since)
    finally:
        _inside = outer
        if _write is not None and not outer:
            _write({"in_candidate": False})


def merge(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The zygote's side: the state the records leave, in order (``in_candidate``, ``milestones`` by name)."""
    state: dict[str, Any] = {"in_candidate": False, "milestones": {}}
    for r in records:
        if isinstance(r.get("in_candidate"), bool):
            state["in_candidate"] = r["in_candidate"]
        if isinstance(r.get("milestones"), dict):
            state["milestones"].update(r["milestones"])
    return state


_PHASES: dict[str, float] = {}
_CURRENT: list[tuple[str, float]] = []


def phase(name: str, where: str | None = None) -> None:
    """Leave a marker, so a timeout or a crash can say how far the candidate got (``where``, more precise than
    the phase, when given: which shape variant, say); time each phase by its ``name``."""
    now = time.monotonic()
    if _CURRENT:
        prev, since = _CURRENT.pop()
        _PHASES[prev] = round(_PHASES.get(prev, 0.0) + now - since, 4)
    _CURRENT.append((name, now))
    with contextlib.suppress(OSError):
        Path("phase").write_text(where or name)


def phase_times() -> dict[str, float]:
    """Seconds spent in each phase so far (the current one included)."""
    out = dict(_PHASES)
    if _CURRENT:
        name, since = _CURRENT[-1]
        out[name] = round(out.get(name, 0.0) + time.monotonic() - since, 4)
    return out
