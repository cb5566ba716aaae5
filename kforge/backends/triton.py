"""Triton backend: ``@triton.jit`` kernels (or ``@gluon.jit``, Triton's explicit dialect for TMA, mbarriers and
warp specialisation) launched from ``ModelNew.forward``.

On a machine without a GPU (CI) the same candidates run on CPU tensors through Triton's interpreter
(``TRITON_INTERPRET=1``): that checks correctness, not speed, with bf16 computed by value
(`kforge.backends.triton_bf16`) and ``@triton.autotune`` keeping its first config (`kforge.backends.triton_autotune`).
"""

from __future__ import annotations

from .base import Backend, WorkerContext


class TritonBackend(Backend):
    name = "triton"
    language = "Triton (Python @triton.jit kernels)"
    default_device = "cuda"
    kernel_patterns = (r"@\s*triton\.jit", r"@\s*jit\b", r"@\s*gluon\.jit\b")
    kernel_hint = "a @triton.jit kernel launched from forward"

    @property
    def interpret(self) -> bool:
        return self.device == "cpu"

    def worker_env(self) -> dict[str, str]:
        return {"TRITON_INTERPRET": "1"} if self.interpret else {}

    def describe(self) -> str:
        mode = "Triton interpreter on CPU tensors: correctness only" if self.interpret else self.device
        return f"{self.name} ({mode})"

    def classify(self, exc: BaseException) -> str | None:
        for cls in type(exc).__mro__:
            if cls.__module__.startswith("triton") and "CompilationError" in cls.__name__:
                return "compilation_failure"
        return None

    def prepare(self, ctx: WorkerContext) -> None:
        """Under the interpreter, bf16 arithmetic by value (`kforge.backends.triton_bf16`): the interpreter alone
        computes on bf16's bit patterns; and ``@triton.autotune`` keeps its first config untimed
        (`kforge.backends.triton_autotune`): the interpreter has no GPU driver to time configs with; and libdevice's
        math computes with NumPy (`kforge.backends.triton_libdevice`), which the interpreter does not implement."""
        if self.interpret:
            from . import triton_autotune, triton_bf16, triton_libdevice
            triton_bf16.install()
            triton_autotune.install()
            triton_libdevice.install()
