"""On-disk cache of model replies keyed by (model, messages, parameters)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .base import LLMResponse


class ResponseCache:
    """One JSON file per request; writes are atomic, so concurrent problem loops can share it."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
        blob = json.dumps({"model": model, "messages": messages, "params": params}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> LLMResponse | None:
        path = self._path(key)
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        resp = LLMResponse(**data)
        resp.cached, resp.latency_s = True, 0.0
        resp.cost_usd = 0.0 if resp.cost_usd is not None else None  # a replay costs nothing
        return resp

    def put(self, key: str, response: LLMResponse) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(response), fh)
        os.replace(tmp, path)
