"""Clean builds remembered, so verifying the same program again skips the build phase and its worker.

The build phase imports a candidate with no device visible so its extensions compile in the build pool; for a
program built before, everything it would compile is in the content-keyed build cache already, and the phase costs
a worker process (a torch import, seconds, competing for the cores with the device worker starting beside it) for a
result known in advance. A build that ended cleanly (nothing failed, nothing refused, the import went through) is
kept under what determines it: the candidate's and the problem's sources, the backend, the arch, torch's and
kforge's versions. It is used only while every extension it built or found is still in the build cache; otherwise
the build runs again. The run phase imports the candidate as always, behind its own write guard, so nothing the
build phase would have checked goes unchecked.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from .. import __version__
from ..cachefile import read_json, write_json
from ..sandbox.devices import torch_version
from ..sandbox.protocol import ProtocolError, encode
from .protocol import BuildRequest, BuildResult


class BuildMemo:
    """``<cache>/build_memo/<key>.json``: a clean `BuildResult`, its extensions all reported as cached."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def key(self, request: BuildRequest, files: dict[str, str]) -> str | None:
        torch = torch_version()
        if torch is None:
            return None
        what = [files.get("candidate.py"), files.get("problem.py"), encode(request.backend), request.arch, torch,
                __version__]
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]

    def get(self, key: str | None) -> BuildResult | None:
        data = read_json(self.root / f"{key}.json") if key else None
        if not data:
            return None
        try:
            found = BuildResult.from_wire(data)
        except ProtocolError:  # kept by another version
            return None
        return found if all(Path(d).is_dir() for d in found.cached) else None

    def put(self, key: str | None, result: BuildResult) -> None:
        clean = not (result.compile_error or result.import_error or result.refused_write or result.failed)
        if key and clean:
            write_json(self.root / f"{key}.json", replace(result, built=[], cached=result.built + result.cached)
                       .to_wire())
