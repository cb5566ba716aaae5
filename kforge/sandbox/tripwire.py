"""Runtime tripwires in the worker: patched functions, changed numerics flags and default dtype, kernels registered
for torch's own operators, stray threads.

A snapshot is taken after the harness has set the process up and before candidate code is imported;
`check` compares against it after the import and after every candidate call. The harness's own clocks
do not depend on any of this (they hold references captured earlier); the tripwire turns a patch
that would fool a weaker harness into a ``cheat_detected`` verdict naming what changed.
"""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import threading
from typing import Any

from .settings import NUMERICS

# (module or class path, attribute): functions a candidate could patch to fake results or timings.
WATCHED: tuple[tuple[str, str], ...] = (
    ("torch", "allclose"), ("torch", "isclose"), ("torch", "equal"), ("torch", "manual_seed"), ("torch", "randn"),
    ("torch", "rand"), ("torch", "empty"), ("torch", "empty_like"), ("torch", "compile"), ("torch", "no_grad"),
    ("torch.Tensor", "__eq__"), ("torch.Tensor", "clone"), ("torch.Tensor", "copy_"), ("torch.Tensor", "fill_"),
    ("torch.Tensor", "zero_"), ("torch.Tensor", "abs"), ("torch.Tensor", "__sub__"), ("torch.Tensor", "to"),
    ("torch.nn.Module", "__call__"), ("torch.nn.Module", "_call_impl"), ("torch.nn.Module", "state_dict"),
    ("time", "perf_counter"), ("time", "time"), ("time", "monotonic"), ("time", "perf_counter_ns"),
    ("torch.cuda", "synchronize"), ("torch.cuda", "current_stream"), ("torch.cuda.Event", "elapsed_time"),
    ("torch.cuda.Event", "record"), ("torch.cuda.Event", "synchronize"), ("torch.utils.cpp_extension", "load_inline"),
    ("threading.Thread", "start"), ("_thread", "start_new_thread"),
)
#: Numerics flags: turning one on (TF32, reduced-precision reductions) is caught; turning one off is not.
FLAGS: tuple[tuple[str, str], ...] = NUMERICS


def _resolve(path: str) -> Any:
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for i, p in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, p)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


def _library_thread(t: Any) -> bool:
    """Threads that torch.compile, Triton or tqdm start for themselves (e.g. tqdm's monitor)."""
    target = getattr(t, "_target", None) if isinstance(t, threading.Thread) else t
    modules = (type(t).__module__ if isinstance(t, threading.Thread) else "", getattr(target, "__module__", "") or "")
    return any(m.startswith(("tqdm", "torch", "triton")) for m in modules)


_STARTED: list[Any] = []
CANDIDATE_FILE = "candidate.py"
"""The file the harness imports candidate code from; a thread started with it on the stack is the candidate's."""


_STDLIB = sysconfig.get_paths()["stdlib"]


def _in_stdlib(filename: str) -> bool:
    # A Python without a venv keeps site-packages under the stdlib folder: those are libraries.
    return filename.startswith(_STDLIB) and "-packages" not in filename


def _from_candidate() -> bool:
    """Whose thread is it? The first frame above the start that is not the standard library decides:
    the candidate's file, or a library's (torch.compile, Triton) when they start threads for themselves."""
    frame = sys._getframe(2)
    while frame is not None and _in_stdlib(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and os.path.basename(frame.f_code.co_filename) == CANDIDATE_FILE


def _record_thread_starts() -> None:
    """Wrap thread creation once per process: every thread the candidate's code starts is recorded,
    even one that has finished by the time anyone looks. Threads torch.compile or Triton start for
    themselves (no candidate code on the stack when they start) are not the candidate's."""
    import _thread
    if getattr(threading.Thread.start, "_kforge", False):
        return
    orig_start, orig_new = threading.Thread.start, _thread.start_new_thread

    def start(self, *args, **kwargs):
        if _from_candidate():
            _STARTED.append(self)
        return orig_start(self, *args, **kwargs)

    def start_new_thread(function, *args, **kwargs):
        if _from_candidate():
            _STARTED.append(function)
        return orig_new(function, *args, **kwargs)

    start._kforge = start_new_thread._kforge = True
    threading.Thread.start = start
    _thread.start_new_thread = start_new_thread


class Tripwire:
    def __init__(self, watched: tuple[tuple[str, str], ...] = ()) -> None:
        """``watched``: more functions to watch, named like `WATCHED` (the layer above names its own)."""
        _record_thread_starts()
        self._ids: dict[str, int] = {}
        self._flags: dict[str, Any] = {}
        for owner, attr in WATCHED + tuple(watched):
            try:
                self._ids[f"{owner}.{attr}"] = id(getattr(_resolve(owner), attr))
            except (ImportError, AttributeError):
                continue
        for owner, attr in FLAGS:
            try:
                self._flags[f"{owner}.{attr}"] = getattr(_resolve(owner), attr)
            except (ImportError, AttributeError):
                continue
        self._default_dtype = _default_dtype()
        self._libraries = _torch_namespaces()
        _record_registrations()
        self.rebaseline_threads()

    def rebaseline_threads(self) -> None:
        """Forget threads started so far (the harness's own set-up)."""
        _STARTED.clear()

    def check(self) -> tuple[str, str] | None:
        """(rule, message) for the first change found, else None."""
        for name, ident in self._ids.items():
            owner, attr = name.rsplit(".", 1)
            try:
                now = getattr(_resolve(owner), attr)
            except (ImportError, AttributeError):
                return "monkey_patch", f"the candidate removed {name}"
            if id(now) != ident:
                return "monkey_patch", f"the candidate replaced {name}"
        for name, value in self._flags.items():
            owner, attr = name.rsplit(".", 1)
            if getattr(_resolve(owner), attr, value) and not value:
                return "numerics_changed", f"the candidate turned on {name} (correctness is judged with it off)"
        if (dtype := _default_dtype()) != self._default_dtype:
            return "numerics_changed", (f"the candidate set torch's default dtype to {dtype} (the problem makes its "
                                        f"tensors in {self._default_dtype}): the reference and the inputs would "
                                        "follow it")
        overridden = [r for r in _REGISTERED if r[0] in self._libraries]
        if overridden:
            ns, op, key = overridden[0]
            return "operator_override", (f"the candidate registered its own {key} kernel for {ns}::{op} with "
                                         "torch.library: the reference and the baselines would call it too")
        started = [t for t in _STARTED if not _library_thread(t)]
        if started:
            name = getattr(started[0], "name", getattr(started[0], "__name__", "?"))
            return "threads", f"the candidate started {len(started)} thread(s) ({name}): work outside the timed call"
        return None


def _default_dtype() -> Any:
    import torch
    return torch.get_default_dtype()


def _torch_namespaces() -> set[str]:
    """The operator namespaces registered before any candidate code: torch's own (``aten``, ``prims``, ...). A
    candidate's own operators live in a namespace of its own; its kernel for an operator of torch's changes what
    the reference computes."""
    import torch
    return {n.split("::", 1)[0] for n in torch._C._dispatch_get_all_op_names()}


_REGISTERED: list[tuple[str, str, str]] = []
"""(namespace, operator, dispatch key) of each kernel registered through ``torch.library`` by candidate code."""


def _record_registrations() -> None:
    """Wrap ``torch.library.Library.impl`` once per process: a registration with candidate code on the stack is
    recorded (torch.compile registers kernels of its own, lazily, for operators of torch's)."""
    import torch.library
    impl = torch.library.Library.impl
    if getattr(impl, "_kforge", False):
        return

    def recorded(self, op_name, fn=None, dispatch_key="", *args, **kwargs):
        if _candidate_on_stack():
            name = getattr(op_name, "__name__", str(op_name)).split("::")[-1].split(".")[0]
            _REGISTERED.append((self.ns, name, dispatch_key or "CompositeImplicitAutograd"))
        return impl(self, op_name, fn, dispatch_key, *args, **kwargs)

    recorded._kforge = True
    torch.library.Library.impl = recorded


def _candidate_on_stack() -> bool:
    """Whether the registration is the candidate's: the first caller outside ``torch.library``'s own helpers
    (``torch.library.impl``, ``register_kernel``) is the candidate's file. torch's modules register kernels for its
    operators as they are imported (its meta kernels, when fake tensors are first used), candidate code above
    them or not."""
    frame = sys._getframe(2)
    while frame is not None and _torch_library_code(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and os.path.basename(frame.f_code.co_filename) == CANDIDATE_FILE


def _torch_library_code(filename: str) -> bool:
    parts = filename.replace("\\", "/").split("/")
    return (parts[-2:] == ["torch", "library.py"] or "_library" in parts[-3:-1] or _in_stdlib(filename))
