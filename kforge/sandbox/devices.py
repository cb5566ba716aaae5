"""What a slot's device is, known without asking a worker: so a one-shot verification need not wait for its device
worker to start before it can name the arch its build targets or the device its timings are kept for.

A worker's ``probe`` (`kforge.sandbox.handlers.probe`) answers for a slot once per pool; its answer is kept on disk
(``<cache>/devices.json``) under what identifies the device without touching it: for a GPU its UUID and driver as
``nvidia-smi`` reports them, for the CPU its model and core count; both with torch's version, read from its package
metadata (importing torch costs seconds). Another GPU, driver or torch is another key, so a kept answer is never
another device's.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
from pathlib import Path

from ..cachefile import read_json, write_json
from .gpus import gpu_identities
from .protocol import DeviceInfo, ProtocolError


@functools.cache
def torch_version() -> str | None:
    """torch's version from its package metadata (what ``torch.__version__`` says), without importing it."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def slot_key(kind: str) -> str | None:
    """What identifies a slot's device without asking it (None: nothing does, so it is probed)."""
    torch = torch_version()
    if torch is None or kind == "build":
        return None
    if kind == "cpu":
        return f"cpu|{_cpu_model()}|{os.cpu_count()}|{torch}"
    if kind.startswith("cuda:"):
        ident = gpu_identities().get(int(kind.split(":", 1)[1]))
        return f"cuda|{ident}|{torch}" if ident else None
    return None


class DeviceCache:
    """``devices.json``: the probe's answer per `slot_key`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def get(self, key: str | None) -> DeviceInfo | None:
        entry = (read_json(self.path) or {}).get(key) if key else None
        try:
            return DeviceInfo.from_wire(entry) if entry else None
        except ProtocolError:  # written by another version
            return None

    def put(self, key: str | None, info: DeviceInfo) -> None:
        if not key or info.error:
            return
        data = read_json(self.path) or {}
        data[key] = info.to_wire()
        write_json(self.path, data)
