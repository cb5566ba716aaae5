"""CuTe DSL backend: kernels in CUTLASS 4's Python DSL (``nvidia-cutlass-dsl``), for NVIDIA GPUs (Hopper here).

A candidate writes a ``@cute.kernel`` and launches it from a ``@cute.jit`` host function it calls in
``forward`` with torch CUDA tensors (or CuTe tensors made from them with ``cute.runtime.from_dlpack``); it may
compile once with ``cute.compile`` and call the executor. The DSL compiles through MLIR to a cubin at the
first call, keyed by the function and its arguments' types; ``CUTE_DSL_CACHE_DIR`` puts its file cache in
kforge's build cache. Which kernels are the candidate's: those launched inside a call into a ``@cute.jit``
function or executor its file defined (`kforge.sandbox.dsl_hooks`). Timing and the L2 flush are the CUDA
clock's.

Untested until its GPU tests run on an H100 (``pip install -e ".[cute]"``; docs/backends.md says which wheels
and how): nothing here can run without an NVIDIA GPU.
"""

from __future__ import annotations

from .base import Backend, WorkerContext


class CuteBackend(Backend):
    name = "cute"
    language = ("CuTe DSL (CUTLASS 4's Python DSL: a @cute.kernel launched from a @cute.jit function, on torch CUDA "
                "tensors)")
    default_device = "cuda"
    kernel_patterns = (r"@\s*cute\.kernel\b", r"@\s*cute\.jit\b", r"\bcute\.compile\s*\(")
    kernel_hint = "a @cute.kernel launched from a @cute.jit function that forward calls"

    def prepare(self, ctx: WorkerContext) -> None:
        # The DSL's compiled kernels persist there, so the run reuses what an earlier verification compiled.
        ctx.library_cache("cute", "CUTE_DSL_CACHE_DIR")

    def classify(self, exc: BaseException) -> str | None:
        for cls in type(exc).__mro__:
            if cls.__module__.startswith("cutlass") and any(w in cls.__name__ for w in ("Compil", "DSLAst", "DSLType")):
                return "compilation_failure"
        return None
