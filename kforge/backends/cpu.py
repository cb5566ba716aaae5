"""CPU backend: C++ (OpenMP allowed) built with ``torch.utils.cpp_extension.load_inline``."""

from __future__ import annotations

from .base import Backend, WorkerContext


class CpuBackend(Backend):
    name = "cpu"
    language = "C++ (OpenMP allowed), built with torch.utils.cpp_extension.load_inline"
    default_device = "cpu"
    # load_inline, or load on source files the candidate writes (the C++ is then in a string all the same).
    kernel_patterns = (r"load_inline\s*\(", r"cpp_extension\.load\s*\(",
                       r"^\s*from\s+torch\.utils\.cpp_extension\s+import\s[^\n]*\bload\b")
    kernel_hint = "a C++ kernel built with torch.utils.cpp_extension.load_inline (or load) and called from forward"

    def prepare(self, ctx: WorkerContext) -> None:
        from .build import Builder
        self.builder = Builder(ctx.cache_dir, use_pch=self.options.get("pch", True),
                               light_header=self.options.get("light_header", True))
        self.builder.install()
