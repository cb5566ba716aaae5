"""What every profiler adapter returns: a `Profile` of the kernels one forward call runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import KforgeError


class ProfilerUnavailable(KforgeError, RuntimeError):
    """This profiler cannot run here (missing tool, no counters, unsupported device); says what to do."""


@dataclass
class KernelStat:
    """One kernel (or, on a CPU, one operator or the candidate's own code) per forward call."""

    name: str
    time_ms: float
    """Time per forward call (all launches of this kernel in the call)."""
    calls: int = 1
    """Launches per forward call."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Named metrics (kforge's short names, see `kforge.profile.ncu.METRICS`), duration-weighted."""


@dataclass
class Profile:
    tool: str
    """``ncu``, ``torch`` or ``nsys``."""
    device: str
    kernels: list[KernelStat]
    total_ms: float
    """Time of one forward call as the profiler saw it (sum of kernel times on a GPU)."""
    raw_files: dict[str, str] = field(default_factory=dict)
    """Raw output kept as artifacts: label -> path."""
    seconds: float = 0.0
    """What profiling cost (wall time)."""
    notes: list[str] = field(default_factory=list)

    def top(self, n: int = 5) -> list[KernelStat]:
        return sorted(self.kernels, key=lambda k: k.time_ms, reverse=True)[:n]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
