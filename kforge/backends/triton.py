"""Triton backend: ``@triton.jit`` kernels (or ``@gluon.jit``, Triton's explicit dialect for TMA, mbarriers and
warp specialisation) launched from ``ModelNew.forward``.

On a machine without a GPU (CI) the same candidates run on CPU tensors through Triton's interpreter
(``TRITON_INTERPRET=1``): that checks correctness, not speed, with bf16 computed by value
(`kforge.backends.triton_bf16`) and ``@triton.autotune`` keeping its first config (`kforge.backends.triton_autotune`).
"""

from __future__ import annotations

import re

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

    @property
    def measures_speed(self) -> bool:
        return not self.interpret

    def worker_env(self) -> dict[str, str]:
        return {"TRITON_INTERPRET": "1"} if self.interpret else {}

    def describe(self) -> str:
        mode = "Triton interpreter on CPU tensors: correctness only" if self.interpret else self.device
        return f"{self.name} ({mode})"

    def classify(self, exc: BaseException) -> str | None:
        from .triton_limits import refused_on_gpu
        if refused_on_gpu(exc):  # the interpreter ran what a GPU compile refuses (`kforge.backends.triton_limits`)
            return "compilation_failure"
        for cls in type(exc).__mro__:
            if cls.__module__.startswith("triton") and "CompilationError" in cls.__name__:
                return "compilation_failure"
        return None

    def hint(self, kind: str, source: str, message: str, precision: str) -> str:
        if kind == "mismatch" and precision == "fp32" and "dot(" in source \
                and not re.search(r"ieee|tf32x3|allow_tf32\s*=\s*False", source):
            return ("; a float32 tl.dot takes its operands as TF32 unless it is given input_precision=\"ieee\" (on a "
                    "GPU, and so here): pass that to keep float32, or judge the kernel at --precision tf32")
        if self.interpret and "is_cuda" in source and (kind == "not_run" or (
                kind == "runtime" and "cuda" in message.lower())):
            return (" (under --device cpu Triton's interpreter is given CPU tensors: a wrapper that checks x.is_cuda "
                    "falls back, or refuses, on every call here)")
        return ""

    def quoted(self, exc: BaseException) -> BaseException:
        from .triton_limits import unwrapped
        return unwrapped(exc)

    def prepare(self, ctx: WorkerContext) -> None:
        """Under the interpreter, bf16 arithmetic by value (`kforge.backends.triton_bf16`): the interpreter alone
        computes on bf16's bit patterns; and ``@triton.autotune`` keeps its first config untimed
        (`kforge.backends.triton_autotune`): the interpreter has no GPU driver to time configs with; and libdevice's
        math computes with NumPy (`kforge.backends.triton_libdevice`), which the interpreter does not implement; and
        what a GPU compile refuses is refused here too (`kforge.backends.triton_limits`)."""
        if self.interpret:
            from . import triton_autotune, triton_bf16, triton_libdevice, triton_limits
            triton_limits.install()
            triton_bf16.install()
            triton_autotune.install()
            triton_libdevice.install()
