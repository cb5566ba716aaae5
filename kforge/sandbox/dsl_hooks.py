"""Calls into the candidate's kernels written in a Python kernel DSL that compiles at run time: CuTe DSL
(``cutlass.cute``) and TileLang. Installed by `Recorder` the moment ``cutlass`` or ``tilelang`` is imported.

Both DSLs hand the candidate a compiled callable: CuTe's ``@cute.jit`` function (compiled on first call) or the
executor ``cute.compile`` returns; TileLang's ``@tilelang.jit`` function, which returns a kernel object for
given shapes (and launches at once when called with tensors). The decorators and ``cute.compile`` are
wrapped: what the candidate's own file decorates or compiles comes back as a `_Launcher`, whose calls with
tensors are recorded like a Triton launch (a ``record_function`` range ``kforge::cute::NAME`` in the profile
trial: a kernel of no known library launched inside it is the candidate's; fingerprinted arguments in the
dataflow trial). CuTe tensors made from torch tensors (``cute.runtime.from_dlpack``) are followed back to
their torch tensors, so the dataflow fingerprints the memory the kernel wrote.

Untested on a GPU until the GPU tests run (tests/backends/test_dsl_backends.py); what can be checked without
one is tested with stand-in modules.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from typing import Any, Callable

from .tripwire import CANDIDATE_FILE


def _defined_by_candidate(fn: Any) -> bool:
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    return code is not None and os.path.basename(code.co_filename) == CANDIDATE_FILE


def _called_from_candidate(depth: int = 2) -> bool:
    frame = sys._getframe(depth)
    return os.path.basename(frame.f_code.co_filename) == CANDIDATE_FILE


class _Launcher:
    """A compiled DSL callable of the candidate's: calls with tensors are launches, recorded; a call that only
    builds a kernel (TileLang's shapes in, kernel out) returns that kernel as a `_Launcher` too."""

    def __init__(self, hooks: "DslHooks", fn: Any, name: str):
        self._hooks, self._fn, self._name = hooks, fn, name
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hooks, rec = self._hooks, self._hooks.rec
        if not hooks.has_tensors(args, kwargs):
            out = self._fn(*args, **kwargs)
            return _Launcher(hooks, out, self._name) if hooks.is_kernel(out) else out
        if rec.mode is None:
            return self._fn(*args, **kwargs)
        rec.triton_names.add(self._name)  # Kineto names such kernels by no symbol of ours: by the range they ran in
        torch_args = tuple(hooks.as_torch(a) for a in args)
        return rec.call(lambda: self._fn(*args, **kwargs), f"{hooks.label}::{self._name}", torch_args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)


class DslHooks:
    """One DSL's wrapping: ``label`` names its launches' ranges, ``kernel_modules`` the modules whose callables
    are compiled kernels."""

    def __init__(self, rec: Any, label: str, kernel_modules: tuple[str, ...]):
        self.rec, self.label, self.kernel_modules = rec, label, kernel_modules
        self.dlpack: dict[int, tuple[type, weakref.ref]] = {}
        """id of a DSL tensor made from a torch tensor -> (its type, a weak reference to the torch tensor). Held
        weakly: a forward makes new ones each call, and holding them would keep every input and output alive
        (out of device memory within a verification). An entry leaves with its DSL tensor."""

    def _torch_of(self, value: Any) -> Any:
        entry = self.dlpack.get(id(value))
        return entry[1]() if entry is not None and type(value) is entry[0] else None

    def has_tensors(self, args: tuple, kwargs: dict) -> bool:
        import torch
        return any(isinstance(a, torch.Tensor) or self._torch_of(a) is not None for a in (*args, *kwargs.values()))

    def as_torch(self, value: Any) -> Any:
        tensor = self._torch_of(value)
        return value if tensor is None else tensor

    def is_kernel(self, value: Any) -> bool:
        return callable(value) and type(value).__module__.startswith(self.kernel_modules)

    def decorator(self, decorate: Callable) -> Callable:
        """Wrap a decorator (``cute.jit``, ``tilelang.jit``), used bare or with arguments."""
        hooks = self

        @functools.wraps(decorate)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if len(args) == 1 and not kwargs and callable(args[0]):
                return hooks._launcher(decorate(args[0]), args[0])
            inner = decorate(*args, **kwargs)
            return lambda fn: hooks._launcher(inner(fn), fn)
        wrapped._kforge = True
        return wrapped

    def _launcher(self, compiled: Any, fn: Any) -> Any:
        if not _defined_by_candidate(fn):
            return compiled
        return _Launcher(self, compiled, getattr(fn, "__name__", "kernel"))

    def compiler(self, compile_fn: Callable) -> Callable:
        """Wrap ``cute.compile(fn, *args)``: the DSL gets its own object back, the candidate a `_Launcher`."""
        hooks = self

        @functools.wraps(compile_fn)
        def wrapped(fn: Any, *args: Any, **kwargs: Any) -> Any:
            own = isinstance(fn, _Launcher)
            executor = compile_fn(fn._fn if own else fn, *args, **kwargs)
            return _Launcher(hooks, executor, fn._name) if own or _called_from_candidate() else executor
        wrapped._kforge = True
        return wrapped

    def from_dlpack(self, convert: Callable) -> Callable:
        hooks = self

        @functools.wraps(convert)
        def wrapped(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            out = convert(tensor, *args, **kwargs)
            hooks.dlpack[id(out)] = (type(out), weakref.ref(tensor))
            try:
                weakref.finalize(out, hooks.dlpack.pop, id(out), None)
            except TypeError:  # not weakly referenceable: its entry stays until another DSL tensor takes the id
                pass
            return out
        return wrapped


def install_cute(rec: Any) -> None:
    """CuTe DSL: ``cute.jit``, ``cute.compile`` and ``cute.runtime.from_dlpack``."""
    import importlib
    cute = importlib.import_module("cutlass.cute")
    if getattr(cute.jit, "_kforge", False):
        return
    hooks = DslHooks(rec, "cute", ("cutlass",))
    cute.jit = hooks.decorator(cute.jit)
    cute.compile = hooks.compiler(cute.compile)
    runtime = getattr(cute, "runtime", None)
    if runtime is not None and hasattr(runtime, "from_dlpack"):
        runtime.from_dlpack = hooks.from_dlpack(runtime.from_dlpack)


def install_tilelang(rec: Any) -> None:
    """TileLang: ``tilelang.jit`` (its kernels are ``tilelang.jit`` objects)."""
    import tilelang
    if getattr(tilelang.jit, "_kforge", False):
        return
    tilelang.jit = DslHooks(rec, "tilelang", ("tilelang",)).decorator(tilelang.jit)
