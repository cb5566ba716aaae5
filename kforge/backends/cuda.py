"""CUDA backend: CUDA C++ kernels built with ``load_inline`` (KernelBench's format) for the worker's GPU."""

from __future__ import annotations

from .base import Backend, WorkerContext


class CudaBackend(Backend):
    name = "cuda"
    language = "CUDA C++, built with torch.utils.cpp_extension.load_inline"
    default_device = "cuda"
    kernel_patterns = (r"__global__",)
    kernel_hint = "a CUDA kernel (__global__) built with load_inline and launched from forward"

    def prepare(self, ctx: WorkerContext) -> None:
        from .build import Builder
        # The arch comes from the GPU the candidate will run on (sm_90a on Hopper), so builds made in
        # the GPU-less build phase target it too.
        self.builder = Builder(ctx.cache_dir, arch=ctx.arch, use_pch=self.options.get("pch", True),
                               torch_free_cu=self.options.get("torch_free_cu", True),
                               light_header=self.options.get("light_header", True))
        self.builder.install()
