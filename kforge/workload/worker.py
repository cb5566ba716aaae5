"""The worker's side of ``kforge workload profile``: build the model, watch it run, profile it.

Runs in a verifier worker's child (request kind ``workload_profile``), where the model file is loaded
exactly as the verifier loads a reference. Three things are recorded, and sent back as plain data:

- how each submodule was constructed: ``nn.Module.__init__`` is wrapped while the model is built, and
  reads the arguments of the outermost ``__init__`` frame of the module being built (the class the
  program named), so a region's ``Model(*get_init_inputs())`` can be built again;
- what each submodule's first call received (shapes, dtypes, literals), by forward pre-hooks;
- time by operator and by the innermost module it ran in, from ``torch.profiler`` with a
  ``record_function`` range around each module's forward. On a GPU the time is the kernels' device time
  charged to the operator that launched them; on a CPU it is the operators' own CPU time.
"""

from __future__ import annotations

import inspect
import math
import sys
import traceback
from typing import Any

from .protocol import ModuleRecord, OpRecord, WorkloadProfileRequest, WorkloadProfileResult

MODULE_RANGE = "kforge.module::"
FORWARD = "kforge_forward"
MODEL_MODULE = "kforge_reference"
"""The module name the harness imports the model file under (`Harness.load_reference`)."""

_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


class NotLiteral(Exception):
    """A value has no source form (a tensor, an open file, a lambda...)."""


class CtorRecorder:
    """Wraps ``nn.Module.__init__`` to keep each module's constructor arguments while a model is built."""

    def __init__(self, torch):
        self.torch = torch
        self.records: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._original = None

    def install(self) -> None:
        Module = self.torch.nn.Module
        original = self._original = Module.__init__
        records = self.records

        def __init__(mod, *args, **kwargs):  # noqa: N807 - stands in for nn.Module.__init__
            original(mod, *args, **kwargs)
            record = _outer_init(mod, sys._getframe(1))
            if record is not None:
                records[id(mod)] = (mod, record)

        Module.__init__ = __init__
        self._had_deepcopy = "__deepcopy__" in Module.__dict__
        if not self._had_deepcopy:
            Module.__deepcopy__ = _deepcopy_as_built(records)

    def uninstall(self) -> None:
        if self._original is not None:
            self.torch.nn.Module.__init__ = self._original
            self._original = None
            if not self._had_deepcopy:
                del self.torch.nn.Module.__deepcopy__

    def record(self, mod) -> dict[str, Any] | None:
        hit = self.records.get(id(mod))
        return hit[1] if hit is not None and hit[0] is mod else None


def _deepcopy_as_built(records: dict[int, tuple[Any, dict[str, Any]]]):
    """``nn.Module.__deepcopy__`` while a model is built: a deep copy was built as its original was.

    `nn.TransformerEncoder` and many models' ``_get_clones`` make their layers by ``copy.deepcopy`` of one
    prototype, which runs no ``__init__``; without this, none of those layers' modules could be written down.
    The copy is made as ``copy.deepcopy`` makes any object without a ``__deepcopy__`` of its own."""
    import copy

    def __deepcopy__(mod, memo):  # noqa: N807 - stands in for the default deep copy
        new = copy._reconstruct(mod, memo, *mod.__reduce_ex__(4))
        hit = records.get(id(mod))
        if hit is not None and hit[0] is mod:
            records[id(new)] = (new, hit[1])
        return new

    return __deepcopy__


def _outer_init(mod, frame) -> dict[str, Any] | None:
    """The arguments of the outermost ``__init__`` running on ``mod`` (its own class's), as bound then."""
    outer = None
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__init__" and code.co_argcount and frame.f_locals.get(code.co_varnames[0]) is mod:
            outer = frame
        frame = frame.f_back
    if outer is None:
        return None
    code, local = outer.f_code, outer.f_locals
    n, k = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames
    i = n + k
    varargs = names[i] if code.co_flags & _CO_VARARGS else None
    varkw = names[i + (1 if varargs else 0)] if code.co_flags & _CO_VARKEYWORDS else None
    copy = lambda v: list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v  # noqa: E731
    return {"code": code, "positional": [(a, copy(local.get(a))) for a in names[1:n]],
            "kwonly": [(a, copy(local.get(a))) for a in names[n:n + k]],
            "varargs": tuple(local.get(varargs, ())) if varargs else (),
            "varkw": dict(local.get(varkw, {})) if varkw else {}}


class Sourcer:
    """Source text for constructor arguments and modules, from what `CtorRecorder` kept."""

    def __init__(self, torch, recorder: CtorRecorder):
        self.torch, self.recorder = torch, recorder
        self.imports: set[str] = set()

    def literal(self, v: Any) -> str:
        torch = self.torch
        if v is None or isinstance(v, (bool, int, str, bytes)):
            return repr(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float({str(v)!r})"
        if isinstance(v, torch.dtype):
            return str(v)
        if isinstance(v, torch.device):
            return f"torch.device({str(v)!r})"
        if isinstance(v, (tuple, list)):  # torch.Size is a tuple
            inner = ", ".join(self.literal(x) for x in v)
            return f"({inner},)" if isinstance(v, tuple) and len(v) == 1 else f"({inner})" \
                if isinstance(v, tuple) else f"[{inner}]"
        if isinstance(v, dict) and all(isinstance(key, str) for key in v):
            return "{" + ", ".join(f"{key!r}: {self.literal(x)}" for key, x in v.items()) + "}"
        if isinstance(v, torch.nn.Module):
            return self.module(v)
        raise NotLiteral(type(v).__name__)

    def class_ref(self, cls) -> str:
        if getattr(self.torch.nn, cls.__name__, None) is cls:
            return f"nn.{cls.__name__}"
        if cls.__module__ == MODEL_MODULE and "." not in cls.__qualname__:
            return cls.__qualname__
        if "<" in cls.__qualname__:
            raise NotLiteral(f"class {cls.__qualname__} defined inside a function")
        self.imports.add(cls.__module__)
        return f"{cls.__module__}.{cls.__qualname__}"

    def module(self, mod) -> str:
        """``Cls(args)``: an expression that builds a module like ``mod`` (weights aside)."""
        rec = self.recorder.record(mod)
        cls = type(mod)
        if rec is None:
            raise NotLiteral(f"{cls.__name__} (its construction was not seen)")
        if getattr(cls.__init__, "__code__", None) is not rec["code"]:
            raise NotLiteral(f"{cls.__name__} (built by another class's __init__)")
        try:
            defaults = {p.name: p.default for p in inspect.signature(cls.__init__).parameters.values()}
        except (TypeError, ValueError):
            defaults = {}
        parts: list[str] = []
        by_position = bool(rec["varargs"])
        for name, value in rec["positional"]:
            default = defaults.get(name, inspect.Parameter.empty)
            if by_position or default is inspect.Parameter.empty:
                parts.append(self.literal(value))
            elif not _same(value, default):
                parts.append(f"{name}={self.literal(value)}")
        parts += [self.literal(v) for v in rec["varargs"]]
        for name, value in rec["kwonly"]:
            if not _same(value, defaults.get(name, inspect.Parameter.empty)):
                parts.append(f"{name}={self.literal(value)}")
        parts += [f"{name}={self.literal(v)}" for name, v in rec["varkw"].items()]
        return f"{self.class_ref(cls)}({', '.join(parts)})"

    def init_args(self, mod) -> list[str] | None:
        """The constructor's arguments as one positional list of literals (a problem's ``get_init_inputs``),
        or None when they are not that (keyword-only or ``**`` arguments, modules)."""
        rec = self.recorder.record(mod)
        if rec is None or rec["kwonly"] or rec["varkw"] or getattr(type(mod).__init__, "__code__", None) \
                is not rec["code"]:
            return None
        values = [v for _, v in rec["positional"]] + list(rec["varargs"])
        if any(isinstance(v, self.torch.nn.Module) for v in values):
            return None
        try:
            return [self.literal(v) for v in values]
        except NotLiteral:
            return None


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - a comparison that does not give a bool
        return False


def value_spec(torch, sourcer: Sourcer, v: Any) -> dict[str, Any]:
    """What a region's ``get_inputs`` needs to make an input like ``v``."""
    if isinstance(v, torch.Tensor):
        spec = {"kind": "tensor", "shape": list(v.shape), "dtype": str(v.dtype)}
        if not (v.is_floating_point() or v.is_complex()) and v.numel() and v.dtype != torch.bool:
            spec["lo"], spec["hi"] = int(v.min()), int(v.max())
        return spec
    if isinstance(v, torch.nn.Module):
        return {"kind": "other", "type": f"a module ({type(v).__name__})"}
    if isinstance(v, (tuple, list)) and any(isinstance(x, torch.Tensor) for x in v):
        # an LSTM's (h0, c0): the region takes each tensor as an input of its own (so the verifier moves it
        # to the device, as it moves only a problem's top-level tensors) and packs them again
        items = [value_spec(torch, sourcer, x) for x in v]
        other = [i for i in items if i["kind"] in ("other", "seq")]
        if other:
            return other[0] if other[0]["kind"] == "other" else {"kind": "other", "type": "a nested sequence"}
        return {"kind": "seq", "type": type(v).__name__, "items": items}
    try:
        return {"kind": "literal", "expr": sourcer.literal(v)}
    except NotLiteral as exc:
        return {"kind": "other", "type": str(exc)}


def run_in_worker(req: WorkloadProfileRequest) -> WorkloadProfileResult:
    """Worker request ``workload_profile``."""
    from ..sandbox.harness import Harness, HarnessVerdict, tail
    from ..sandbox.quiet import take_quiet_lock
    from ..verify.config import VerifyConfig
    take_quiet_lock()
    h = Harness(req, VerifyConfig.from_dict(req.config))
    h.setup(flush_l2=True)
    torch = h.torch
    recorder = CtorRecorder(torch)
    recorder.install()
    try:
        h.load_reference()
    except HarnessVerdict as v:
        return WorkloadProfileResult(error="the model failed to build",
                                     traceback=(v.extra.get("evidence") or {}).get("traceback"))
    finally:
        recorder.uninstall()
    model = h.ref_model
    if not isinstance(model, torch.nn.Module):
        return WorkloadProfileResult(error=f"Model(*get_init_inputs()) is a {type(model).__name__}, not a "
                                           "torch.nn.Module")
    try:
        inputs = h.inputs(h.draw())
        with torch.no_grad():
            calls = _capture_calls(torch, model, Sourcer(torch, recorder), inputs)
            timed = _profile(torch, h, model, inputs, req.iterations, req.warmup)
    except Exception:  # noqa: BLE001 - the model's own error, reported with its traceback
        return WorkloadProfileResult(error="the model failed to run", traceback=tail(traceback.format_exc()))
    sourcer = Sourcer(torch, recorder)
    modules = []
    for path, mod in model.named_modules():
        entry = {"path": path, "type": type(mod).__name__, "in_model": type(mod).__module__ == MODEL_MODULE,
                 "in_torch": type(mod).__module__.startswith("torch."),
                 "children": [f"{path}.{c}" if path else c for c, _ in mod.named_children()],
                 "params": sum(p.numel() for p in mod.parameters()), "calls": calls.get(path)}
        if path:
            try:
                entry["ctor"] = sourcer.module(mod)
            except NotLiteral as exc:
                entry["ctor_error"] = f"cannot write its constructor call: {exc}"
            entry["init_args"] = sourcer.init_args(mod)
            entry["param_dtypes"] = sorted({str(p.dtype) for p in mod.parameters()})
        modules.append(entry)
    return WorkloadProfileResult(**timed, modules=[ModuleRecord.from_wire(m) for m in modules],
                                 imports=sorted(sourcer.imports), device=str(h.device))


def _capture_calls(torch, model, sourcer: Sourcer, inputs: list[Any]) -> dict[str, dict[str, Any]]:
    """Per module path: its first call's arguments (specs) and how many calls one forward makes."""
    calls: dict[str, dict[str, Any]] = {}
    handles = []
    for path, mod in model.named_modules():
        def pre(m, args, kwargs, path=path):
            seen = calls.get(path)
            if seen is not None:
                seen["n"] += 1
                return None
            calls[path] = {"n": 1, "args": [value_spec(torch, sourcer, a) for a in args],
                           "kwargs": {k: value_spec(torch, sourcer, v) for k, v in kwargs.items()}}
            return None
        handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
    try:
        model(*inputs)
    finally:
        for hd in handles:
            hd.remove()
    return calls


def _profile(torch, h, model, inputs, iters: int, warmup: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile, record_function
    cuda = h.device.type == "cuda"
    stack: list[Any] = []
    handles = []
    for path, mod in model.named_modules():
        def pre(m, args, path=path):
            rf = record_function(MODULE_RANGE + path)
            rf.__enter__()
            stack.append(rf)

        def post(m, args, out):
            if stack:
                stack.pop().__exit__(None, None, None)
        handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    for _ in range(warmup):
        model(*inputs)
    h.clock.sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with profile(activities=activities) as prof:
            for _ in range(iters):
                with record_function(FORWARD):
                    model(*inputs)
                h.clock.sync()
    finally:
        for hd in handles:
            hd.remove()
    return attribute(prof.events(), cuda, iters)


def attribute(events, cuda: bool, iters: int) -> dict[str, Any]:
    """Each operator's own time, charged to it and to the innermost module range around it (per forward, ms)."""
    by_module: dict[str, float] = {}
    by_op: dict[str, list[float]] = {}
    wall = 0.0
    for e in events:
        name = e.name
        if name == FORWARD:
            wall += e.cpu_time_total
            continue
        if name.startswith(MODULE_RANGE):
            continue
        device_type = str(getattr(e, "device_type", "DeviceType.CPU"))
        if not device_type.endswith("CPU"):
            continue  # a device event: its time is already in the self_device time of the op that launched it
        t = self_device_us(e) if cuda else e.self_cpu_time_total
        if t <= 0:
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith(MODULE_RANGE):
            parent = parent.cpu_parent
        module = parent.name[len(MODULE_RANGE):] if parent is not None else ""
        by_module[module] = by_module.get(module, 0.0) + t
        row = by_op.setdefault(name, [0.0, 0])
        row[0] += t
        row[1] += 1
    n = max(1, iters) * 1e3  # microseconds summed over iters -> milliseconds per forward
    return {"self_ms": {k: v / n for k, v in by_module.items()},
            "ops": [OpRecord(name=k, ms=v[0] / n, calls=max(1, round(v[1] / max(1, iters)))) for k, v in by_op.items()],
            "total_ms": sum(by_module.values()) / n, "wall_ms": wall / n, "iterations": iters}


def self_device_us(event) -> float:
    """The device time of the kernels an operator launched itself (microseconds, all its calls).

    torch >= 2.4 names it ``self_device_time_total``; before, ``self_cuda_time_total`` (since deprecated, so it
    is read only where the new name is missing). Kernels are charged to the innermost operator that launched
    them, so an operator that only calls others (``aten::linear`` around ``aten::addmm``) has none."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0
