"""Hooks that see the candidate's own code run: installed in a worker before any candidate code loads.

`Recorder.install` wraps what a candidate uses to launch its kernels:

* the modules ``torch.utils.cpp_extension.load_inline``/``load`` return (every function of a built
  extension, whichever way the candidate reaches it: a module on ``self``, ``getattr``, a helper class,
  a ``torch.autograd.Function``); the ``.so`` files they came from are remembered, so their kernels can
  be told apart from PyTorch's by symbol;
* Triton's ``JITFunction.run`` (and the interpreter's), for kernels defined in the candidate's file —
  at once where Triton is imported already, otherwise the moment anyone imports it (importing Triton
  costs 0.46 s on an H100, which a CUDA candidate in a light worker need not pay);
* CuPy's user kernels (``RawKernel``, ``RawModule``'s functions, ``ElementwiseKernel``, ``ReductionKernel``),
  the moment anyone imports CuPy: their launches write PyTorch's memory through CuPy arrays, which the
  dataflow follows by address;
* pyopencl's launches and copies, the moment anyone imports pyopencl (`kforge.sandbox.opencl_hooks`): kernels
  from programs the candidate built are its own, and the dataflow follows their OpenCL buffers;
* CuTe DSL's and TileLang's compiled callables, the moment ``cutlass`` or ``tilelang`` is imported
  (`kforge.sandbox.dsl_hooks`): those the candidate's file decorated or compiled are its kernels;
* ``torch.cuda.CUDAGraph.replay``, whose writes no hook can see.

Outside the two attribution trials each hook costs one flag test. In the *profile* trial a call is
wrapped in a ``record_function`` range (``kforge::ext::NAME``, ``kforge::triton::NAME``); in the
*dataflow* trial it goes through `Dataflow`, which records which memory the candidate's kernels wrote.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
from typing import Any, Callable

from .tripwire import CANDIDATE_FILE

RANGE = "kforge::"


class Recorder:
    """Counts and routes calls into the candidate's kernels; one per worker process."""

    def __init__(self) -> None:
        self.mode: str | None = None
        """None (pass calls straight through), ``count`` (count them alone: a shape variant's check that the
        candidate's kernels ran there), ``profile`` or ``dataflow``."""
        self.so_paths: list[str] = []
        """Shared objects of the extensions the candidate built or loaded."""
        self.triton_names: set[str] = set()
        """Names of the candidate's Triton kernels that were launched (Kineto reports kernels by them)."""
        self.calls = 0
        """Calls into the candidate's kernels while recording."""
        self.graph_replays = 0
        """CUDA graph replays while recording: their writes are invisible to the dataflow."""
        self.flow = None

    # -- installation -----------------------------------------------------------------------------
    def install(self) -> None:
        import torch.utils.cpp_extension as ce
        for name in ("load_inline", "load"):
            setattr(ce, name, self._loader(getattr(ce, name)))
        for name, wrap in (("triton", self._wrap_triton), ("cupy", self._wrap_cupy), ("pyopencl", self._wrap_opencl),
                           ("cutlass", self._wrap_cute), ("tilelang", self._wrap_tilelang)):
            if name in sys.modules:
                wrap()
            else:
                sys.meta_path.insert(0, _AfterImport(name, wrap))
        try:
            import torch.cuda.graphs as graphs
            replay = graphs.CUDAGraph.replay
            rec = self

            def counted_replay(graph, *a, **k):
                if rec.mode is not None:
                    rec.graph_replays += 1
                return replay(graph, *a, **k)
            graphs.CUDAGraph.replay = counted_replay
        except (ImportError, AttributeError):
            pass

    def _loader(self, load: Callable) -> Callable:
        rec = self

        @functools.wraps(load)
        def loading(*args, **kwargs):
            ops_before = _op_names() if _host_only() else None
            module = load(*args, **kwargs)
            for name in sorted(_op_names() - ops_before if ops_before is not None else ()):
                rec._wrap_op(*name.split("::", 1))  # TORCH_LIBRARY registrations: called as torch.ops.NS.OP
            if isinstance(module, str):  # is_python_module=False: the ops live under torch.ops
                rec.so_paths.append(module)
                return module
            path = getattr(module, "__file__", None)
            if path:
                rec.so_paths.append(path)
            for attr in dir(module):
                fn = getattr(module, attr, None)
                if not attr.startswith("_") and type(fn).__name__ == "builtin_function_or_method":
                    setattr(module, attr, rec._wrap(fn, f"ext::{attr}"))
            return module
        return loading

    def _wrap_triton(self) -> None:
        classes = []
        try:
            from triton.runtime.jit import JITFunction
            classes.append(JITFunction)
        except ImportError:
            return
        try:
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        except ImportError:
            pass
        rec = self
        for cls in classes:
            run = cls.__dict__.get("run")
            if run is None or getattr(run, "_kforge", False):
                continue

            def launch(kernel, *args, _run=run, **kwargs):
                fn = getattr(kernel, "fn", None)
                mine = rec.mode is not None and fn is not None and \
                    os.path.basename(getattr(getattr(fn, "__code__", None), "co_filename", "")) == CANDIDATE_FILE
                if not mine:
                    return _run(kernel, *args, **kwargs)
                rec.triton_names.add(fn.__name__)
                return rec.call(lambda: _run(kernel, *args, **kwargs), f"triton::{fn.__name__}", args, kwargs)
            launch._kforge = True
            cls.run = launch

    def _wrap_cupy(self) -> None:
        """CuPy's kernel types are compiled (Cython) and cannot be patched: its module's names are rebound to
        subclasses whose calls are recorded, before the candidate's ``import cupy`` returns."""
        import cupy
        rec = self
        for name in ("RawKernel", "ElementwiseKernel", "ReductionKernel", "RawModule"):
            base = getattr(cupy, name, None)
            if not isinstance(base, type) or getattr(base, "_kforge", False):
                continue
            if name == "RawModule":
                get = base.get_function
                members = {"get_function": lambda module, fn_name, _get=get: _CupyFunction(
                    rec, _get(module, fn_name), f"cupy::{fn_name}")}
            else:
                members = {"__call__": _CupyFunction(rec, base.__call__, f"cupy::{name}").unbound()}
            try:
                setattr(cupy, name, type(name, (base,), {**members, "_kforge": True, "__module__": base.__module__}))
            except TypeError:  # a type that cannot be subclassed: its launches go unrecorded
                continue

    def _wrap_opencl(self) -> None:
        from .opencl_hooks import OpenClHooks
        OpenClHooks(self).install()

    def _wrap_cute(self) -> None:
        from .dsl_hooks import install_cute
        install_cute(self)

    def _wrap_tilelang(self) -> None:
        from .dsl_hooks import install_tilelang
        install_tilelang(self)

    def _wrap_op(self, namespace: str, op: str) -> None:
        """An operator the candidate's extension registered (``TORCH_LIBRARY(ns, m) { m.def("relu", ...); }``) is
        one of its kernels however it is reached: ``torch.ops.ns.relu`` and its overloads (``.default``). On a
        worker without a GPU only (`_host_only`)."""
        import torch
        name = op.split(".", 1)[0]
        space = getattr(torch.ops, namespace)
        try:
            packet = getattr(space, name)
        except (AttributeError, RuntimeError):
            return
        if not isinstance(packet, _RecordedCall):
            setattr(space, name, _RecordedCall(self, packet, f"ext::{name}"))

    def _wrap(self, fn: Callable, label: str) -> Callable:
        rec = self

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if rec.mode is None:
                return fn(*args, **kwargs)
            return rec.call(lambda: fn(*args, **kwargs), label, args, kwargs)
        return call

    # -- recording --------------------------------------------------------------------------------
    def call(self, run: Callable[[], Any], label: str, args: tuple, kwargs: dict, memories: tuple = ()) -> Any:
        """One call into the candidate's kernels (``memories``: buffers of its kernel API the call was given)."""
        self.calls += 1
        if self.mode == "profile":
            from torch.profiler import record_function
            with record_function(RANGE + label):
                return run()
        if self.mode == "dataflow" and self.flow is not None:
            if memories:
                return self.flow.candidate_call(run, args, kwargs, memories)
            return self.flow.candidate_call(run, args, kwargs)
        return run()

    def start(self, mode: str, flow=None) -> None:
        self.mode, self.flow = mode, flow
        self.calls = self.graph_replays = 0

    def stop(self) -> None:
        self.mode, self.flow = None, None


class _CupyFunction:
    """A CuPy launch, recorded: a ``RawModule``'s function (CuPy's own type cannot be subclassed to that end), or
    a kernel type's ``__call__``."""

    def __init__(self, rec: Recorder, fn: Any, label: str):
        self._rec, self._fn, self._label = rec, fn, label

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._rec.mode is None:
            return self._fn(*args, **kwargs)
        return self._rec.call(lambda: self._fn(*args, **kwargs), self._label, _addresses(args), kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)

    def unbound(self) -> Callable:
        """As a method of a kernel type (``self._fn`` its unbound ``__call__``): a plain function binds."""
        def call(kernel: Any, *args: Any, **kwargs: Any) -> Any:
            return self(kernel, *args, **kwargs)
        return call


class _RecordedCall:
    """An operator of the candidate's (``torch.ops.ns.op``, or one overload of it), its calls recorded; anything
    else about it (its schema, its overloads, themselves recorded) as the operator has it."""

    def __init__(self, rec: Recorder, fn: Any, label: str):
        self._rec, self._fn, self._label = rec, fn, label

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._rec.mode is None:
            return self._fn(*args, **kwargs)
        return self._rec.call(lambda: self._fn(*args, **kwargs), self._label, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        import torch
        value = getattr(self._fn, name)
        return _RecordedCall(self._rec, value, self._label) if isinstance(value, torch._ops.OpOverload) else value


def _host_only() -> bool:
    """A worker that sees no GPU. Only there are the extension's operators wrapped: on a GPU worker its kernels are
    the candidate's by symbol (its ``.so``) and such a program was judged right unwrapped, while wrapped it crashed
    the dataflow trial (SIGSEGV, H200, torch 2.11: a cause not found in the device time left)."""
    import torch
    return not torch.cuda.is_available()


def _op_names() -> set[str]:
    """The operators registered with PyTorch's dispatcher (``ns::op.overload``)."""
    import torch
    names = getattr(torch._C, "_dispatch_get_all_op_names", None)
    return set(names()) if names is not None else set()


def _addresses(args: Any) -> list:
    """A CuPy launch's arguments with each array replaced by its device address, for the dataflow to find the
    PyTorch memory it points into (a CuPy array made from a tensor shares its memory)."""
    out = []
    for a in args:
        if isinstance(a, (tuple, list)):
            out.extend(_addresses(a))
        else:
            ptr = getattr(getattr(a, "data", None), "ptr", None)
            out.append(ptr if isinstance(ptr, int) else a)
    return out


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then`` once the top-level module ``name`` has finished importing, whoever imports it; imports
    nothing itself. One shot: it leaves ``sys.meta_path`` when the import begins."""

    def __init__(self, name: str, then: Callable[[], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the finders after this one
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module, then = spec.loader.exec_module, self.then

        def exec_then(module):
            exec_module(module)
            then()
        spec.loader.exec_module = exec_then
        return spec
