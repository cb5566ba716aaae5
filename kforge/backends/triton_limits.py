"""What Triton's compiler for a GPU refuses and its interpreter lets through (installed by `TritonBackend.prepare` in a
worker that runs the interpreter, before any candidate code).

On CPU a Triton kernel runs in the interpreter, which skips the checks a GPU compile makes. A bf16 ``tl.dot`` on a
K block of 8 was ``correct`` there and does not compile for an H100 ("Input shapes should have M >= 1, N >= 1 and
K >= 16"); so was a libdevice function called on bf16 values, which has float32 and float64 versions only. Here the
dot takes NVIDIA's own lower bounds (`min_dot_size` from Triton's NVIDIA backend, its bit-width rule where that is
not importable), and `kforge.backends.triton_libdevice` raises `RefusedOnGpu` for an operand type a function has no
version for. Either reads as the ``compilation_failure`` it is on a GPU (`refused_on_gpu`).

What the interpreter cannot show at all: it runs a grid's programs one after another, so two programs racing on one
address (a load, an add, a store where an atomic belongs) never lose an update there. docs/backends.md says so.
"""

from __future__ import annotations

import functools


class RefusedOnGpu(Exception):
    """A call the interpreter would run and Triton's compiler for a GPU refuses."""

    def __repr__(self) -> str:  # the interpreter wraps it as InterpreterError(repr(exc)): the words alone
        return str(self)


def _bitwidth_rule(lhs_type, rhs_type) -> tuple[int, int, int]:
    """(M, N, K) lower bounds of a dot on NVIDIA GPUs, by the operands' bit width (Triton 3.x's rule)."""
    bits = lhs_type.scalar.primitive_bitwidth
    return (1, 1, {8: 32, 64: 4, 32: 8}.get(bits, 16))


def install() -> bool:
    """Give the interpreter's builder NVIDIA's dot bounds; False where there is no interpreter."""
    try:
        from triton.runtime import interpreter as interp
    except ImportError:
        return False
    try:
        from triton.backends.nvidia.compiler import min_dot_size
        rule = min_dot_size(None)  # the target is not read: the bounds depend on the operands' width
    except Exception:  # noqa: BLE001 - another Triton: the same rule, written out
        rule = _bitwidth_rule
    cls = getattr(interp, "InterpreterBuilder", None)
    if cls is None:
        return False
    if not getattr(cls, "_kforge_limits", False):
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.codegen_fns["min_dot_size"] = rule
        cls.__init__ = __init__
        cls._kforge_limits = True
    shared = getattr(interp, "interpreter_builder", None)  # made when the interpreter was imported
    if shared is not None:
        shared.codegen_fns["min_dot_size"] = rule
    return True


def unwrapped(exc: BaseException) -> BaseException:
    """The error the interpreter's ``InterpreterError`` wrappers (nested, one a call) hold; ``exc`` if none."""
    while type(exc).__name__ == "InterpreterError" and exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def refused_on_gpu(exc: BaseException) -> bool:
    """Whether an interpreter failure is one a GPU compile reports: `RefusedOnGpu`, or a check of Triton's language
    (``triton.language``: a dot's bounds, an operand's type) raised while the interpreter ran the kernel."""
    cause = unwrapped(exc)
    if cause is exc:
        return False
    if isinstance(cause, RefusedOnGpu):
        return True
    tb = cause.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    return module.startswith("triton.language") and isinstance(cause, (AssertionError, TypeError, ValueError))
