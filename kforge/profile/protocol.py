"""The profilers' request to a worker's child and what comes back: ``profile_torch`` (torch.profiler in a
worker), and the same request as ncu and nsys hand it to their runner process (`kforge.profile.runner`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..sandbox.protocol import Message, ProgramRequest


@dataclass(frozen=True, kw_only=True)
class OpRow:
    """One row of torch.profiler's ``key_averages``: an operator, a kernel or a range, over all iterations."""

    name: str
    calls: int
    cpu_total_ms: float
    self_cpu_ms: float
    device_total_ms: float
    self_device_ms: float


@dataclass(frozen=True, kw_only=True)
class ProfileResult(Message):
    rows: list[OpRow] = field(default_factory=list)
    table: str = ""
    """torch.profiler's own table, kept as an artifact."""
    iterations: int = 1
    device: str = "cpu"
    """The torch device the program ran on (``cuda``, ``cpu``)."""
    passes: dict[str, str] = field(default_factory=dict)
    """A training step's (``verify.backward``): kernel or operator name -> the pass it ran in (``forward``,
    ``backward`` or ``both``)."""
    error: str | None = None
    """Why the program could not be loaded (its state and message)."""


@dataclass(frozen=True, kw_only=True)
class ProfileRequest(ProgramRequest):
    KIND: ClassVar[str] = "profile_torch"
    RESULT: ClassVar[type[Message]] = ProfileResult
    which: str = "candidate"
    """``candidate`` or ``reference``: which program is profiled."""
    iterations: int = 3
    """Profiled forward calls."""
    warmup: int = 2
    """Calls before the profiled ones."""

    def __post_init__(self) -> None:
        if self.which not in ("candidate", "reference"):
            raise ValueError(f"which must be candidate or reference, not {self.which!r}")
