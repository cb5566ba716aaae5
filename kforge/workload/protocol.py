"""The whole-model profile's request to a worker's child and what comes back (``workload_profile``).

Sent by `kforge.workload.profile.profile_model`, served by `kforge.workload.worker.run_in_worker`; the
caller turns the result into a `kforge.workload.profile.WorkloadProfile`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..sandbox.protocol import Message, ProgramRequest


@dataclass(frozen=True, kw_only=True)
class CallRecord(Message):
    """A module's first call in one forward, and how many calls the forward made."""

    n: int
    args: list[dict[str, Any]] = field(default_factory=list)
    """Each positional argument as a spec: ``{"kind": "tensor", "shape": ..., "dtype": ...}``, a literal, ..."""
    kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ModuleRecord(Message):
    """One submodule as the worker saw it built and run (the model itself has path ``""``)."""

    path: str
    type: str
    in_model: bool = False
    """Its class is defined in the model file."""
    in_torch: bool = False
    children: list[str] = field(default_factory=list)
    params: int = 0
    calls: CallRecord | None = None
    """None: it never ran."""
    ctor: str | None = None
    """An expression that builds it again, when its construction could be read."""
    ctor_error: str | None = None
    init_args: list[str] | None = None
    param_dtypes: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class OpRecord(Message):
    name: str
    ms: float
    """Per forward."""
    calls: int


@dataclass(frozen=True, kw_only=True)
class WorkloadProfileResult(Message):
    error: str | None = None
    """Why the model could not be profiled (it failed to build or to run)."""
    traceback: str | None = None
    self_ms: dict[str, float] = field(default_factory=dict)
    """Per module path: the time of operators that ran in its forward and in no submodule's (ms per forward)."""
    ops: list[OpRecord] = field(default_factory=list)
    total_ms: float = 0.0
    wall_ms: float = 0.0
    iterations: int = 0
    modules: list[ModuleRecord] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    device: str = ""


@dataclass(frozen=True, kw_only=True)
class WorkloadProfileRequest(ProgramRequest):
    KIND: ClassVar[str] = "workload_profile"
    RESULT: ClassVar[type[Message]] = WorkloadProfileResult
    iterations: int = 3
    warmup: int = 2
