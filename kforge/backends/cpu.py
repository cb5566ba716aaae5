"""CPU backend: C++ (OpenMP allowed) built with ``torch.utils.cpp_extension.load_inline``."""

from __future__ import annotations

from .base import Backend, WorkerContext


class CpuBackend(Backend):
    name = "cpu"
    language = "C++ (OpenMP allowed), built with torch.utils.cpp_extension.load_inline"
    default_device = "cpu"
    kernel_patterns = (r"load_inline\s*\(",)
    kernel_hint = "a C++ kernel built with torch.utils.cpp_extension.load_inline and called from forward"

    def prepare(self, ctx: WorkerContext) -> None:
        from .build import Builder
        self.builder = Builder(ctx.cache_dir, use_pch=self.options.get("pch", True))
        self.builder.install()
