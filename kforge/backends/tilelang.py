"""TileLang backend: tile programs in Python (``tilelang``), compiled through TVM for NVIDIA GPUs (Hopper here).

A candidate writes a ``@tilelang.jit`` function that returns a ``T.prim_func`` (``T.Kernel`` blocks, shared
and fragment buffers, ``T.copy``, ``T.gemm`` on tensor cores, ``T.Parallel`` loops), gets a kernel for its
shapes and calls it in ``forward`` with torch CUDA tensors. TileLang compiles at the first call for each set
of shapes; ``TILELANG_CACHE_DIR`` puts its kernel cache in kforge's build cache. The candidate's kernels are
those launched by kernel objects its file's ``@tilelang.jit`` functions made (`kforge.sandbox.dsl_hooks`).

Untested until its GPU tests run on an H100 (``pip install -e ".[tilelang]"``; docs/backends.md says which
wheels and how): nothing here can run without an NVIDIA GPU.
"""

from __future__ import annotations

from .base import Backend, WorkerContext


class TileLangBackend(Backend):
    name = "tilelang"
    language = ("TileLang (Python tile programs: @tilelang.jit returning a T.prim_func with T.Kernel, shared and "
                "fragment buffers, T.copy and T.gemm, on torch CUDA tensors)")
    default_device = "cuda"
    kernel_patterns = (r"@\s*tilelang\.jit\b", r"@\s*T\.prim_func\b", r"\bT\.Kernel\s*\(")
    kernel_hint = "a @tilelang.jit tile program (T.prim_func with T.Kernel) whose kernel forward calls"

    def prepare(self, ctx: WorkerContext) -> None:
        ctx.library_cache("tilelang", "TILELANG_CACHE_DIR")

    def classify(self, exc: BaseException) -> str | None:
        for cls in type(exc).__mro__:
            module = cls.__module__
            if module.startswith(("tilelang", "tvm")) and any(w in cls.__name__ for w in ("Compil", "Diagnostic")):
                return "compilation_failure"
        return None
