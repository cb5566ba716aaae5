"""Backends: one file each; add a new accelerator by registering a `Backend` subclass here."""

from __future__ import annotations

from typing import Any

from .base import Backend, BackendSpec, WorkerContext
from .cpu import CpuBackend
from .cuda import CudaBackend
from .cute import CuteBackend
from .opencl import OpenClBackend
from .tilelang import TileLangBackend
from .triton import TritonBackend

BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (CpuBackend, CudaBackend, TritonBackend, OpenClBackend,
                                                           CuteBackend, TileLangBackend)}


def get_backend(name: str | Backend, device: str | None = None, **options: Any) -> Backend:
    """A backend by name; raises ValueError naming the valid choices."""
    if isinstance(name, Backend):
        return name
    try:
        cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})") from None
    return cls(device=device, **options)


def from_spec(spec: BackendSpec) -> Backend:
    """The backend a `BackendSpec` describes (in a worker: the caller's backend, made again)."""
    return get_backend(spec.name, device=spec.device, **spec.options)


__all__ = ["BACKENDS", "Backend", "BackendSpec", "WorkerContext", "get_backend", "from_spec"]
