"""`profile_model`: where a KernelBench-format model spends its time, by module and by operator.

The model runs in a verifier worker (`kforge.workload.worker`), never in the caller's process: a model
file is code like any candidate. The reply becomes a `WorkloadProfile`: every module with its own time
(operators that ran in its forward and in no submodule's) and its inclusive time, and every operator.
Own times sum to the total, so shares of modules sum to 1, and so do shares of operators.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import KforgeError
from ..problems import Problem
from .protocol import WorkloadProfileRequest, WorkloadProfileResult


class WorkloadError(KforgeError, RuntimeError):
    """A workload cannot be profiled, extracted or assembled; the message says which file and why."""


@dataclass
class ModuleTime:
    """One submodule of the model (the model itself has path ``""``)."""

    path: str
    """Attribute path from the model (``attn.qkv``)."""
    type: str
    """Class name."""
    self_ms: float
    """Time of the operators that ran in its own forward and in no submodule's, per model forward."""
    total_ms: float
    """Its own time plus its submodules'."""
    share: float
    """``total_ms`` over the model's total."""
    children: list[str] = field(default_factory=list)
    """Paths of its direct submodules."""
    calls: int = 0
    """Calls per model forward (0: it never ran)."""
    inputs: dict[str, Any] | None = None
    """Its first call's arguments: ``args`` and ``kwargs`` as specs (tensor shape and dtype, or a literal)."""
    in_model: bool = False
    """Its class is defined in the model file (not in torch or another package)."""
    in_torch: bool = False
    """Its class is torch's own (``torch.nn.MultiheadAttention``)."""
    ctor: str | None = None
    """An expression that builds it again (``nn.Linear(256, 512)``), when its construction could be read."""
    ctor_error: str | None = None
    """Why there is no ``ctor``."""
    init_args: list[str] | None = None
    """Its constructor's arguments as a positional list of literals, when they are that."""
    params: int = 0
    """Parameters it holds (its submodules' included)."""
    param_dtypes: list[str] = field(default_factory=list)

    @property
    def leaf(self) -> bool:
        return not self.children


@dataclass
class OpTime:
    """One operator (``aten::addmm``) over the whole forward."""

    name: str
    ms: float
    share: float
    calls: int


@dataclass
class WorkloadProfile:
    """Where one forward call of a model spends its time, on one device."""

    model: str
    """The model file (or the problem's key)."""
    backend: str
    device: str
    size: str
    total_ms: float
    """Operator time per forward (device time on a GPU, operators' CPU time on a CPU)."""
    wall_ms: float
    """Host wall time per forward under the profiler (on a CPU: operators plus the Python around them)."""
    modules: list[ModuleTime]
    ops: list[OpTime]
    imports: list[str] = field(default_factory=list)
    """Modules (besides torch) whose classes the model's constructors name."""
    precision: str = "fp32"
    """The precision it ran in (`kforge.precision`): at bf16 or fp16 its floating inputs, parameters and buffers were
    cast, as ``kforge verify --precision`` casts them, so the hot regions are those of the model in that precision."""

    def module(self, path: str) -> ModuleTime:
        for m in self.modules:
            if m.path == path:
                return m
        raise KeyError(path)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "WorkloadProfile":
        data = dict(data)
        data["modules"] = [ModuleTime(**m) for m in data["modules"]]
        data["ops"] = [OpTime(**o) for o in data["ops"]]
        return cls(**data)


def from_reply(result: WorkloadProfileResult, *, model: str, backend: str, size: str,
               precision: str = "fp32") -> WorkloadProfile:
    """The worker's result (see `kforge.workload.worker.run_in_worker`) as a `WorkloadProfile`."""
    total = result.total_ms or 0.0
    own = result.self_ms
    rows = {m.path: m for m in result.modules}

    def inclusive(path: str) -> float:
        return own.get(path, 0.0) + sum(inclusive(c) for c in rows[path].children)

    modules = []
    for m in result.modules:
        incl = inclusive(m.path)
        calls = m.calls
        modules.append(ModuleTime(
            path=m.path, type=m.type, self_ms=own.get(m.path, 0.0), total_ms=incl,
            share=incl / total if total else 0.0, children=list(m.children), calls=calls.n if calls else 0,
            inputs={"args": calls.args, "kwargs": calls.kwargs} if calls else None, in_model=m.in_model,
            in_torch=m.in_torch, ctor=m.ctor, ctor_error=m.ctor_error, init_args=m.init_args,
            params=m.params, param_dtypes=list(m.param_dtypes)))
    ops = sorted((OpTime(o.name, o.ms, o.ms / total if total else 0.0, o.calls) for o in result.ops),
                 key=lambda o: -o.ms)
    return WorkloadProfile(model=model, backend=backend, device=result.device, size=size, total_ms=total,
                           wall_ms=result.wall_ms, modules=modules, ops=ops, imports=list(result.imports),
                           precision=precision)


def profile_model(problem: Problem, backend, pool, *, iterations: int = 3, warmup: int = 2,
                  timeout_s: float = 600.0, config=None) -> WorkloadProfile:
    """Profile ``problem``'s model on ``backend``'s device, in a worker of ``pool``, in ``config.precision``."""
    from ..backends import get_backend
    from ..verify import VerifyConfig
    backend = get_backend(backend)
    kinds = pool.kinds_for(backend.device)
    if not kinds:
        raise WorkloadError(f"the {backend.name} backend runs on {backend.device} and none is visible here; "
                            f"use --backend cpu")
    where = problem.path or problem.key
    config = config or VerifyConfig()
    request = WorkloadProfileRequest(problem=problem, backend=backend.spec(), config=config.to_dict(),
                                     iterations=iterations, warmup=warmup)
    reply = pool.request(kinds, request, {"problem.py": problem.source}, timeout_s)
    if reply.timed_out:
        raise WorkloadError(f"{where}: profiling took longer than {timeout_s:g} s")
    result = reply.result
    if result is None or result.error or not result.modules:
        detail = _last_line(result.traceback if result else None) or reply.error or reply.output_tail or ""
        raise WorkloadError(f"{where}: {(result.error if result else None) or 'the worker failed'}"
                            + (f": {detail}" if detail else ""))
    return from_reply(result, model=where, backend=backend.name, size=problem.size, precision=config.precision)


def _last_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _label(path: str) -> str:
    return path or "(model)"


def render_table(profile: WorkloadProfile, top: int = 15) -> str:
    """Modules by their own time and operators by time, as text."""
    lines = [f"{profile.model} on {profile.device} ({profile.backend}, size {profile.size}, "
             f"{profile.precision}): "
             f"{profile.total_ms:.3f} ms of operators per forward ({profile.wall_ms:.3f} ms wall)", "",
             f"{'module':32} {'type':22} {'own ms':>9} {'own %':>6} {'total ms':>9} {'total %':>7}"]
    mods = sorted((m for m in profile.modules if m.self_ms > 0), key=lambda m: -m.self_ms)
    for m in mods[:top]:
        own = m.self_ms / profile.total_ms * 100 if profile.total_ms else 0.0
        lines.append(f"{_label(m.path)[:32]:32} {m.type[:22]:22} {m.self_ms:9.3f} {own:6.1f} {m.total_ms:9.3f} "
                     f"{m.share * 100:7.1f}")
    if len(mods) > top:
        lines.append(f"... {len(mods) - top} more modules")
    lines += ["", f"{'operator':40} {'ms':>9} {'%':>6} {'calls':>6}"]
    for o in profile.ops[:top]:
        lines.append(f"{o.name[:40]:40} {o.ms:9.3f} {o.share * 100:6.1f} {o.calls:6d}")
    if len(profile.ops) > top:
        lines.append(f"... {len(profile.ops) - top} more operators")
    return "\n".join(lines)


def plot(profile: WorkloadProfile, path: str | Path, top: int = 12) -> Path:
    """A PNG: share of time by module (own time) and by operator, horizontal bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mods = sorted((m for m in profile.modules if m.self_ms > 0), key=lambda m: -m.self_ms)[:top]
    ops = profile.ops[:top]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.35 * max(len(mods), len(ops), 4) + 1.5), dpi=110)
    for ax, names, values, title in (
            (axes[0], [f"{_label(m.path)} ({m.type})" for m in mods],
             [m.self_ms / profile.total_ms if profile.total_ms else 0 for m in mods], "by module (own time)"),
            (axes[1], [o.name for o in ops], [o.share for o in ops], "by operator")):
        ax.barh(range(len(names))[::-1], values, color="tab:blue")
        ax.set_yticks(range(len(names))[::-1], names, fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of the forward's operator time")
        ax.set_title(title)
    fig.suptitle(f"{Path(profile.model).name} on {profile.device} in {profile.precision}: {profile.total_ms:.2f} ms "
                 "per forward")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
