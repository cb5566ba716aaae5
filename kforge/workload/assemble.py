"""Putting kernels back: one candidate program for the whole model, its verdict, and Amdahl's bound.

`assemble` writes ONE program defining `ModelNew` for the original model file: the model's own code
(its module-level names prefixed ``_kf_model_``), each region kernel's code (prefixed ``_kf_rN_``; two
regions with the same kernel share one copy), and a `ModelNew` that subclasses the model, builds it as
the model builds itself (so with the verifier's seed it draws the reference's very weights), then
replaces each region's module by the kernel's ModelNew with the module's weights copied in by the
region's state-dict prefixes. A region without a kernel keeps the model's module. The whole-model check
is the verifier's ordinary check of that program against the model file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..problems import Problem, load_problem_file
from ..verify.retime import ROUNDS, measured, retime, timing_only
from .extract import Workload
from .profile import WorkloadError
from .source import SourceError, closure, import_bindings, module_names, rename_top_level, strip_entry_points

_FUTURE = "from __future__ import annotations"

_TEMPLATE = '''

_KF_REGIONS = [
    # (module path, its kernel's ModelNew, constructor arguments, (kernel's state prefix, model's state prefix),
    #  the positions of inputs that are sequences of tensors, which the kernel takes one tensor at a time)
{entries}
]


def _kf_swap(model, path, module):
    parent, _, name = path.rpartition('.')
    (model.get_submodule(parent) if parent else model).add_module(name, module)


def _kf_unpack(packed):
    def hook(module, args):  # (x, (h0, c0)) -> (x, h0, c0) at the positions in packed
        return tuple(t for i, a in enumerate(args) for t in (a if i in packed else (a,)))
    return hook


class ModelNew({base}):
    """{model} with its regions replaced by their kernels (assembled by kforge)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        state = self.state_dict()
        for path, cls, init_args, (new, old), packed in _KF_REGIONS:
            region = cls(*init_args)
            theirs = {{new + k[len(old):]: v for k, v in state.items() if k.startswith(old)}}
            mine = region.state_dict()
            if set(mine) != set(theirs):
                raise RuntimeError(f"region {{path}}: the kernel's ModelNew holds {{sorted(mine)}} where the "
                                   f"model's module holds {{sorted(theirs)}}; keep the region Model's parameter names")
            region.load_state_dict(theirs)
            if packed:
                region.register_forward_pre_hook(_kf_unpack(packed))
            _kf_swap(self, path, region)
'''


def _without_future(source: str) -> tuple[str, bool]:
    lines = source.splitlines()
    kept = [ln for ln in lines if ln.strip() != _FUTURE]
    return "\n".join(kept), len(kept) != len(lines)


def model_source(workload: Workload) -> str:
    """The model file as the workload ran it (its size preset applied)."""
    return load_problem_file(workload.model, size=workload.size if workload.size in ("cpu", "gpu") else None).source


def assemble(workload: Workload, kernels: dict[str, str], source: str | None = None) -> str:
    """One program defining ModelNew for the workload's model, with ``kernels`` (region name or path ->
    a program defining ModelNew for that region's problem) in place of their regions' modules."""
    known = {r.name for r in workload.regions} | {r.path for r in workload.regions}
    unknown = sorted(set(kernels) - known)
    if unknown:
        raise WorkloadError(f"no region {', '.join(unknown)} in the workload of {workload.model} "
                            f"(regions: {', '.join(r.name for r in workload.regions)})")
    text = source if source is not None else model_source(workload)
    try:
        base_src, future = _without_future(closure(strip_entry_points(text), "Model", where=workload.model))
    except SourceError as exc:
        raise WorkloadError(str(exc)) from None
    base_src, base_map = rename_top_level(base_src, "_kf_model_")
    parts = [f"# ---- the model ({Path(workload.model).name}): its code outside the regions runs as written ----",
             base_src]
    bindings: dict[str, tuple[str, str]] = {alias: (imp, "the model") for alias, imp in import_bindings(base_src).items()}
    shared: dict[str, str] = {}
    entries = []
    for i, region in enumerate(workload.regions, 1):
        kernel = kernels.get(region.name, kernels.get(region.path))
        if kernel is None:
            continue
        try:
            body, fut = _without_future(strip_entry_points(kernel))
        except SyntaxError as exc:
            raise WorkloadError(f"the kernel for region {region.name} does not parse: line {exc.lineno}: {exc.msg}") \
                from None
        future |= fut
        if "ModelNew" not in module_names(body):
            raise WorkloadError(f"the kernel for region {region.name} defines no ModelNew")
        if body not in shared:
            for alias, imp in import_bindings(body).items():
                other = bindings.setdefault(alias, (imp, f"region {region.name}"))
                if other[0] != imp:
                    raise WorkloadError(f"region {region.name}'s kernel binds `{alias}` to `{imp}`, {other[1]} to "
                                        f"`{other[0]}`: one name cannot be both in one program")
            renamed, mapping = rename_top_level(body, f"_kf_r{i}_")
            shared[body] = mapping["ModelNew"]
            parts += [f"# ---- region {region.name}: module `{region.path}` ({region.type}) ----", renamed]
        args = "(" + "".join(f"{a}, " for a in region.init_args) + ")"
        packed = tuple(j for j, spec in enumerate(region.inputs) if spec.get("kind") == "seq")
        entries.append(f"    ({region.path!r}, {shared[body]}, {args}, {tuple(region.weights)!r}, {packed!r}),")
    program = "\n\n\n".join(parts) + _TEMPLATE.format(entries="\n".join(entries), base=base_map["Model"],
                                                       model=Path(workload.model).name)
    head = f'"""{Path(workload.model).name} assembled from its regions\' kernels by `kforge workload assemble`."""\n'
    return head + (_FUTURE + "\n" if future else "") + program


def amdahl_bound(shares: list[float], speedups: list[float]) -> float:
    """End-to-end speedup when parts of shares ``s_i`` run ``k_i`` times faster: 1 / (1 - Σs_i + Σ s_i/k_i)."""
    if len(shares) != len(speedups):
        raise ValueError("one speedup per share")
    if any(s < 0 for s in shares) or sum(shares) > 1 + 1e-6:
        raise ValueError(f"shares must be non-negative and sum to at most 1, not {shares}")
    if any(k <= 0 for k in speedups):
        raise ValueError(f"speedups must be positive, not {speedups}")
    rest = max(0.0, 1.0 - sum(shares))
    return 1.0 / (rest + sum(s / k for s, k in zip(shares, speedups)))


@dataclass
class RegionKernel:
    """A region's best correct kernel and its speedup over eager on the region's problem."""

    source: str
    speedup: float | None = None


@dataclass
class RegionOutcome:
    name: str
    path: str
    share: float
    replaced: bool
    """Its kernel is in the assembled model (False: the model's own module runs)."""
    speedup: float | None = None
    """The kernel's speedup over eager on the region's problem, when known: re-timed beside the assembled model."""
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    """Its interval (`kforge.verify.retime`), where it was re-timed."""


@dataclass
class WorkloadResult:
    """The assembled model's verdict against the original model, and what Amdahl's law allowed."""

    state: str
    message: str
    speedup_eager: float | None
    speedup_compile: float | None
    bound: float | None
    """Amdahl's bound from the replaced regions' shares and speedups (None: a speedup is unknown)."""
    coverage: float
    """Share of the model's time in regions."""
    replaced_share: float
    """Share of the model's time in regions whose kernel is in the assembled model."""
    regions: list[RegionOutcome] = field(default_factory=list)
    source: str = ""
    """The assembled program."""
    verdict: dict[str, Any] = field(default_factory=dict)
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    """The end-to-end speedup's interval over eager (`kforge.verify.retime`)."""
    bound_lo: float | None = None
    bound_hi: float | None = None
    """The bound at the lower and upper ends of the regions' intervals."""
    precision: str = "fp32"
    """The precision both models ran in (`kforge.precision`)."""

    @property
    def correct(self) -> bool:
        return self.state == "correct"

    @property
    def replaced(self) -> list[str]:
        return [r.name for r in self.regions if r.replaced]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        fmt = lambda x: f"{x:.2f}x" if x is not None else "-"  # noqa: E731
        where = "" if self.precision == "fp32" else f" in {self.precision}"
        why = f" ({self.message})" if self.message and not self.correct else ""
        lines = [f"whole model{where}: {self.state}{why}",
                 f"  regions replaced: {len(self.replaced)}/{len(self.regions)} ({self.replaced_share * 100:.1f}% "
                 f"of the model's time; regions cover {self.coverage * 100:.1f}%)",
                 f"  end-to-end speedup: {fmt(self.speedup_eager)}{_interval(self.speedup_lo, self.speedup_hi)} vs "
                 f"eager, {fmt(self.speedup_compile)} vs torch.compile; Amdahl bound {fmt(self.bound)}"
                 f"{_interval(self.bound_lo, self.bound_hi)}" + (f" (both re-timed {ROUNDS} rounds, interleaved)"
                                                                if self.speedup_lo is not None else "")]
        for r in self.regions:
            lines.append(f"  {'replaced' if r.replaced else 'original'} {r.name} ({r.share * 100:.1f}%"
                         + (f", {r.speedup:.2f}x{_interval(r.speedup_lo, r.speedup_hi)} alone"
                            if r.speedup is not None else "") + ")")
        return "\n".join(lines)


def _interval(lo: float | None, hi: float | None) -> str:
    return f" [{lo:.2f}-{hi:.2f}]" + (" ~" if lo <= 1.0 <= hi else "") if lo is not None and hi is not None else ""


def evaluate(workload: Workload, verifier, backend, kernels: dict[str, RegionKernel], *, config=None,
             problem: Problem | None = None, rounds: int = ROUNDS) -> WorkloadResult:
    """Assemble the regions' kernels (a region absent from ``kernels`` keeps its module) and verify the
    assembled model against the model file with ``verifier``. A correct one is then timed again with every
    replaced region's kernel on its own problem, ``rounds`` rounds interleaved (`kforge.verify.retime`), so the
    end-to-end speedup and the regions' speedups behind Amdahl's bound come from the same timings, each a median
    with its interval."""
    problem = problem or load_problem_file(workload.model, size=workload.size if workload.size in ("cpu", "gpu")
                                           else None)
    by_region = {r.name: kernels.get(r.name) or kernels.get(r.path) for r in workload.regions}
    source = assemble(workload, {k: v.source for k, v in by_region.items() if v is not None}, problem.source)
    # The assembled model builds its regions with the sizes they were extracted at (their constructors written
    # down with literal arguments): the model file's shape variants are not its sizes.
    config = dataclasses.replace(config or verifier.config, variants=False)
    verdict = verifier.verify(problem, source, backend, config)
    cfg = config
    speeds = _retimed(workload, verifier, backend, problem, source, by_region, cfg, rounds) \
        if verdict.correct and not cfg.skip_timing and rounds > 0 else {}
    outcomes = []
    for r in workload.regions:
        k, s = by_region[r.name], speeds.get(r.name)
        outcomes.append(RegionOutcome(r.name, r.path, r.share, k is not None, s.value if s else (k.speedup if k else None),
                                      s.lo if s else None, s.hi if s else None))
    done = [o for o in outcomes if o.replaced]
    shares, speedups = [o.share for o in done], [o.speedup for o in done]
    bound = amdahl_bound(shares, speedups) if all(s is not None for s in speedups) else None
    ends = {}
    if bound is not None and all(o.speedup_lo is not None for o in done):
        ends = {"bound_lo": amdahl_bound(shares, [max(o.speedup_lo, 1e-6) for o in done]),
                "bound_hi": amdahl_bound(shares, [o.speedup_hi for o in done])}
    whole = speeds.get(_MODEL)
    return WorkloadResult(state=str(verdict.state), message=verdict.message,
                          speedup_eager=whole.value if whole else verdict.speedup_eager,
                          speedup_compile=verdict.speedup_compile, bound=bound, coverage=workload.coverage,
                          replaced_share=sum(o.share for o in done), regions=outcomes, source=source,
                          verdict=verdict.to_dict(), speedup_lo=whole.lo if whole else None,
                          speedup_hi=whole.hi if whole else None, precision=cfg.precision, **ends)


#: `_retimed`'s key for the assembled model itself.
_MODEL = ""


def _retimed(workload: Workload, verifier, backend, problem: Problem, source: str,
             by_region: dict[str, RegionKernel | None], cfg, rounds: int) -> dict[str, Any]:
    """The assembled model (key ``""``) and each replaced region's kernel timed ``rounds`` rounds, interleaved:
    their speedups over eager (`kforge.verify.retime.Speedup`) by region name."""
    programs = {_MODEL: (problem, source)}
    programs.update({name: (workload.load_region(next(r for r in workload.regions if r.name == name)), k.source)
                     for name, k in by_region.items() if k is not None})
    timing = timing_only(cfg, rounds)
    timed = retime(lambda name: verifier.verify(programs[name][0], programs[name][1], backend, timing),
                   list(programs), rounds)
    return {name: s for name, verdicts in timed.items() if (s := measured(verdicts, "eager")) is not None}


def check_regions(workload: Workload, verifier, backend, kernels: dict[str, str], *,
                  config=None) -> tuple[dict[str, RegionKernel], dict[str, Any]]:
    """Verify each region's kernel on its own problem: (the correct ones with their speedups, every verdict)."""
    best: dict[str, RegionKernel] = {}
    verdicts: dict[str, Any] = {}
    for r in workload.regions:
        source = kernels.get(r.name, kernels.get(r.path))
        if source is None:
            continue
        verdict = verifier.verify(workload.load_region(r), source, backend, config)
        verdicts[r.name] = verdict
        if verdict.correct:
            best[r.name] = RegionKernel(source, verdict.speedup_eager)
    return best, verdicts
