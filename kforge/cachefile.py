"""Small JSON files in kforge's cache directory, written atomically (several processes share the cache)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any


def read_json(path: str | os.PathLike) -> Any | None:
    """The file's content; None when it is missing or unreadable (a cache entry is only ever a shortcut)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Write through a private temporary file and a rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(path: str | os.PathLike):
    """Hold an exclusive lock on ``path`` (created if missing) for the block: one process at a time."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
