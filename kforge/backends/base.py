"""The backend protocol: what kforge needs to know to target one accelerator language.

A backend is small on purpose. It names its language and device, points at its one-shot example
(``prompts/examples/<name>/``, or ``prompts/examples/<name>/<precision>/`` where a precision has its own,
e.g. bf16 on tensor cores), says how to spot a kernel in a candidate, prepares a worker process
to load candidates (e.g. install the build cache), and picks the clock that times them. Everything
else — isolation, correctness, timing rounds — is shared. A new accelerator is one example plus one
small subclass registered in ``kforge/backends/__init__.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .. import DATA_DIR

EXAMPLES_DIR = DATA_DIR / "prompts" / "examples"


@dataclass(frozen=True)
class BackendSpec:
    """What a worker needs to make the same backend again (`kforge.backends.from_spec`)."""

    name: str
    """The registry key (``cpu``, ``cuda``, ``triton``)."""
    device: str
    """Torch device type its candidates run on."""
    options: dict[str, Any] = field(default_factory=dict)
    """The backend's own options, as given to its constructor."""


@dataclass
class WorkerContext:
    """What a worker process knows when it prepares a backend."""

    cache_dir: str
    """Root of the persistent build cache."""
    arch: str | None = None
    """CUDA arch of the worker's GPU for TORCH_CUDA_ARCH_LIST (e.g. ``9.0a``), None on CPU."""
    build_only: bool = False
    """True in the build phase (no device visible): compile, do not run."""

    def library_cache(self, folder: str, variable: str) -> None:
        """Point a library's kernel cache (environment ``variable``) at ``folder`` of kforge's build cache, made
        here, before candidate code runs: the write guard lets a candidate write where the variable points, not
        the folders above it that the library's own makedirs would touch."""
        import os
        cache = Path(self.cache_dir) / folder
        cache.mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(cache)


class Backend:
    """Base class; subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    """Registry key, Hydra ``backend=`` choice and examples folder name."""
    language: ClassVar[str]
    """The kernel language, as the prompt names it."""
    default_device: ClassVar[str] = "cuda"
    """Torch device type candidates run on."""
    kernel_patterns: ClassVar[tuple[str, ...]] = ()
    """Regexes; a candidate must match one to count as containing a kernel in this language."""
    kernel_hint: ClassVar[str] = ""
    """What the kernel-presence rule asks for, in words."""
    static_deny: ClassVar[tuple[str, ...]] = ()
    """Extra regexes that reject a candidate on this backend."""
    static_allow: ClassVar[tuple[str, ...]] = ()
    """Regexes of source lines this backend allows although a rule would flag them."""
    static_disabled: ClassVar[tuple[str, ...]] = ()
    """Static rules that do not apply to this backend."""

    def __init__(self, device: str | None = None, **options: Any):
        self.device = device or self.default_device
        self.options = options
        self.builder = None
        """The extension builder `prepare` installed in a worker, if this backend compiles extensions."""

    # -- used by the caller ------------------------------------------------------------------------
    def example_dir(self, precision: str = "fp32", backward: bool = False) -> Path:
        """The folder the one-shot example for ``precision`` (and a training step, with ``backward``) is read
        from: the precision's own (``prompts/examples/<name>/<precision>/``, then ``.../backward/``) where it
        holds both files; at fp16 else bf16's (half-width storage, float32 accumulation, as fp16 asks); else the
        backend's float32 one (`example_precision` says which it is)."""
        from ..precision import PRECISIONS
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
        base = EXAMPLES_DIR / self.name
        tried = {"fp32": [], "fp16": ["fp16", "bf16"]}.get(precision, [precision])
        for d in [base / p for p in tried] + [base]:
            d = d / "backward" if backward else d
            if (d / "model.py").is_file() and (d / "model_new.py").is_file():
                return d
        if backward:
            raise ValueError(f"backend {self.name} has no training-step example (prompts/examples/{self.name}/"
                             "backward/), so its agents cannot be asked for backward kernels (verify.backward); "
                             f"backends with one: {', '.join(backward_examples())}")
        return base

    def example_precision(self, precision: str = "fp32", backward: bool = False) -> str:
        """The precision the one-shot example `example_dir` picks is written for (``fp32`` for the backend's own)."""
        from ..precision import PRECISIONS
        d = self.example_dir(precision, backward)
        name = d.parent.name if backward else d.name
        return name if name in PRECISIONS else "fp32"

    def example(self, precision: str = "fp32", backward: bool = False) -> tuple[str, str]:
        """The one-shot example: (a small PyTorch module, its implementation in this backend); with ``backward``, the
        training step's (``backward/``: forward and backward kernels behind torch.autograd.Function)."""
        d = self.example_dir(precision, backward)
        return (d / "model.py").read_text(), (d / "model_new.py").read_text()

    def example_problem(self, precision: str = "fp32", backward: bool = False):
        """The example's PyTorch module as a `Problem` (it is a KernelBench-format program)."""
        from ..problems import problem_from_source
        model, _ = self.example(precision, backward)
        suffix = ("" if precision == "fp32" else f"_{precision}") + ("_backward" if backward else "")
        return problem_from_source(model, where=str(self.example_dir(precision, backward) / "model.py"),
                                   name=f"example_{self.name}{suffix}")

    def spec(self) -> BackendSpec:
        """What a worker needs to rebuild this backend."""
        return BackendSpec(self.name, self.device, dict(self.options))

    def worker_env(self) -> dict[str, str]:
        """Environment variables for worker processes running this backend's candidates."""
        return {}

    def has_kernel(self, source: str) -> bool:
        return any(re.search(p, source, re.MULTILINE) for p in self.kernel_patterns)

    def describe(self) -> str:
        return f"{self.name} ({self.language} on {self.device})"

    # -- used inside the worker --------------------------------------------------------------------
    def prepare(self, ctx: WorkerContext) -> None:
        """Get the process ready to import candidates (runs before any candidate code)."""

    def make_clock(self, flush_bytes: int):
        from .clocks import CpuClock, CudaClock
        return CudaClock(flush_bytes) if self.device == "cuda" else CpuClock()

    def classify(self, exc: BaseException) -> str | None:
        """Map a backend-specific exception to a verdict state (None: use the default rules)."""
        return None

    @property
    def measures_speed(self) -> bool:
        """Whether a run on this backend's device says anything of a kernel's speed (Triton's interpreter does not)."""
        return True

    def hint(self, kind: str, source: str, message: str, precision: str) -> str:
        """A cause models often meet behind a failure of this backend's candidates, said after the verdict's message
        ("" where none): ``kind`` is ``mismatch``, ``not_run`` (its kernels did not run) or ``runtime``."""
        return ""

    def quoted(self, exc: BaseException) -> BaseException:
        """The exception whose words a verdict quotes: ``exc``, or the error an interpreter's wrapper of it holds."""
        return exc

    def __repr__(self) -> str:
        return f"<backend {self.describe()}>"


def backward_examples() -> list[str]:
    """The backends whose one-shot examples include a training step (``prompts/examples/<name>/backward/``)."""
    return sorted(d.parent.name for d in EXAMPLES_DIR.glob("*/backward") if (d / "model_new.py").is_file())
