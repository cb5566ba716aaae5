"""`extract`: the hot regions of a profiled model, each written as a KernelBench problem, and `workload.json`.

A region is one submodule (see docs/workload.md for why modules and not graph partitions): the highest
module on each branch of the module tree that is a *block* (a leaf, a module whose submodules are all
leaves, at most `MAX_BLOCK_CHILDREN` of them, or a torch module other than a container, whose children are
its implementation) and can be written down (its constructor call was read, its inputs are tensors or
literals). A submodule of a torch module is never a region: torch's code reads its children's attributes
and weights directly (`nn.MultiheadAttention` hands ``out_proj.weight`` to a functional call), so a kernel
put there would fail or never run. Blocks are taken hottest first until ``top`` regions or a
``cover`` share of the model's time is reached.

A region file is either
- *class*: the module's own class from the model file, renamed `Model`, with what it needs from the
  file, ``get_init_inputs`` returning the arguments it was built with: its parameters have the very
  names they have in the model under the module's path;
- *wrapper*: a `Model` holding the module as one attribute (any class torch or the file defines,
  keyword arguments included), with ``get_init_inputs`` returning ``[]``.
``get_inputs`` draws tensors of the shapes and dtypes the module's first call received (floats from
``randn``, integers within the range seen). `Region.weights` says which of the model's parameters are
the region's: assembly copies them in by that prefix.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..precision import PRECISIONS
from ..problems import Problem, load_problem_file
from ..problems.equivalent import builtin_equivalent
from .profile import ModuleTime, WorkloadError, WorkloadProfile
from .source import SourceError, closure, module_names, rename, strip_entry_points

MAX_BLOCK_CHILDREN = 8
"""A module with more direct submodules than this is split into them (a long nn.Sequential is no kernel)."""
TORCH_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
"""torch modules whose forward (if any) only calls their children in turn: their children may be regions."""

WORKLOAD_JSON = "workload.json"


@dataclass
class Region:
    """One extracted region: a problem file and the module it stands for."""

    name: str
    """The problem file's stem (``1_attn_AttentionBlock``)."""
    file: str
    """The problem file, relative to `workload.json`'s folder."""
    path: str
    """The module's path in the model (``attn``)."""
    type: str
    """The module's class."""
    style: str
    """``class`` (its own class, renamed Model) or ``wrapper`` (held as one attribute of a Model)."""
    share: float
    """Its share of the model's operator time (all its calls)."""
    time_ms: float
    calls: int
    """Calls per model forward; the problem is written at the first call's shapes."""
    inputs: list[dict[str, Any]]
    """The first call's arguments (specs: shape and dtype, or a literal)."""
    init_args: list[str]
    """``get_init_inputs()`` as source literals: how assembly builds the region's ModelNew."""
    weights: tuple[str, str]
    """(the region Model's state-dict prefix, the model's): ``("", "attn.")`` or ``("linear.", "up.linear.")``."""
    equivalent: str | None = None
    """The built-in problem whose Model this region's Model is, if one is (the oracle answers it)."""


@dataclass
class Workload:
    """A model's hot regions and how much of its time they cover; saved as `workload.json`."""

    model: str
    """The model file."""
    backend: str
    device: str
    size: str
    """The model file's size preset the run used (regions are at its shapes)."""
    total_ms: float
    """The model's operator time per forward in the profile."""
    regions: list[Region]
    coverage: float
    """Sum of the regions' shares."""
    skipped: list[dict[str, Any]] = field(default_factory=list)
    """Hot modules that are no region, each with ``path``, ``share`` and ``why``."""
    precision: str = "fp32"
    """The precision the model was profiled in and its regions and whole are verified in (region files are written
    as the model file is; verification casts them)."""
    root: str = "."
    """The folder region files are relative to (set when loaded; not saved)."""

    def region(self, key: str) -> Region:
        for r in self.regions:
            if key in (r.name, r.path, r.file):
                return r
        raise WorkloadError(f"no region {key!r} in the workload of {self.model} "
                            f"(regions: {', '.join(r.name for r in self.regions)})")

    def region_file(self, region: Region) -> Path:
        return Path(self.root) / region.file

    def load_region(self, region: Region) -> Problem:
        return load_problem_file(self.region_file(region))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("root")
        return data

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / WORKLOAD_JSON
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Workload":
        p = Path(path)
        p = p / WORKLOAD_JSON if p.is_dir() else p
        try:
            data = json.loads(p.read_text())
            data["regions"] = [Region(**dict(r, weights=tuple(r["weights"]))) for r in data["regions"]]
            return cls(**data, root=str(p.parent))
        except FileNotFoundError:
            raise WorkloadError(f"{p}: no such workload file (write one with `kforge workload extract`)") from None
        except (ValueError, TypeError, KeyError) as exc:
            raise WorkloadError(f"{p}: not a workload file ({exc})") from None


def _why_not(m: ModuleTime) -> str | None:
    """Why a module cannot be a region on its own (None: it can)."""
    if not m.calls or not m.inputs:
        return "it never ran"
    if m.ctor is None:
        return m.ctor_error or "its constructor call is unknown"
    bad = [s for s in list(m.inputs["args"]) + list(m.inputs["kwargs"].values()) if s["kind"] == "other"]
    if bad:
        return f"an input is {bad[0]['type']}, neither a tensor nor a literal"
    if any(s["kind"] == "seq" for s in m.inputs["kwargs"].values()):
        return "a keyword input is a sequence of tensors"
    return None


def blocks(profile: WorkloadProfile) -> tuple[list[ModuleTime], list[dict[str, Any]]]:
    """The candidate regions (see the module docstring) and the timed modules left out, with why."""
    by_path = {m.path: m for m in profile.modules}
    found: list[ModuleTime] = []
    skipped: list[dict[str, Any]] = []

    def library(m: ModuleTime | None) -> bool:
        return m is not None and m.in_torch and m.type not in TORCH_CONTAINERS

    def visit(m: ModuleTime, parent: ModuleTime | None = None) -> None:
        kids = [by_path[c] for c in m.children]
        is_block = m.leaf or library(m) or (len(kids) <= MAX_BLOCK_CHILDREN and all(k.leaf for k in kids))
        why = _why_not(m) if m.path else "it is the whole model"
        if why is None and library(parent):
            why = f"torch's {parent.type} around it reads its attributes and weights itself"
        if is_block and why is None:
            found.append(m)
            return
        if m.self_ms > 0:
            reason = why if why is not None else f"it has {len(kids)} submodules, not all leaves"
            skipped.append({"path": m.path, "type": m.type, "share": m.self_ms / profile.total_ms
                            if profile.total_ms else 0.0, "why": f"own time outside any region ({reason})"})
        for k in kids:
            visit(k, m)

    visit(by_path[""])
    return found, skipped


def choose(profile: WorkloadProfile, *, top: int | None = None, cover: float = 0.8,
           min_share: float = 0.0) -> tuple[list[ModuleTime], list[dict[str, Any]]]:
    """The hottest blocks until ``top`` of them or a ``cover`` share; the rest are reported as skipped."""
    if top is not None and top < 1:
        raise WorkloadError(f"--top must be at least 1, not {top}")
    if not 0 < cover <= 1:
        raise WorkloadError(f"--cover is a share of the model's time, in (0, 1], not {cover}")
    found, skipped = blocks(profile)
    chosen: list[ModuleTime] = []
    total = 0.0
    for m in sorted(found, key=lambda m: -m.share):
        if (top is not None and len(chosen) >= top) or total >= cover - 1e-9 or m.share <= min_share:
            skipped.append({"path": m.path, "type": m.type, "share": m.share, "why": "not among the hottest chosen"})
            continue
        chosen.append(m)
        total += m.share
    return chosen, skipped


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_") or "model"


def _as_written(dtype: str, precision: str) -> str:
    """A dtype the profile saw, as the region file writes it: at bf16 or fp16 the cast floating inputs and weights
    are float32 in the file, as in the model file (verification at the precision casts them again)."""
    p = PRECISIONS.get(precision)
    return "torch.float32" if p is not None and p.reduced and dtype == f"torch.{p.storage}" else dtype


def _tensor_expr(spec: dict[str, Any], precision: str = "fp32") -> str:
    if spec["kind"] == "literal":
        return spec["expr"]
    shape, dtype = tuple(spec["shape"]), _as_written(spec["dtype"], precision)
    if dtype == "torch.bool":
        return f"torch.rand({shape!r}) < 0.5"
    if "lo" in spec:
        return f"torch.randint({spec['lo']}, {spec['hi'] + 1}, {shape!r}, dtype={dtype})"
    if dtype in ("torch.float32", "torch.float64", "torch.float16", "torch.bfloat16", "torch.complex64"):
        return f"torch.randn({shape!r}, dtype={dtype})"
    return f"torch.zeros({shape!r}, dtype={dtype})"  # an integer tensor with no elements


def _leaves(name: str, spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(parameter name, spec) of each input the region's forward takes for one input of the module."""
    if spec["kind"] == "seq":
        return [(f"{name}_{j}", item) for j, item in enumerate(spec["items"])]
    return [(name, spec)]


def _packed(name: str, spec: dict[str, Any]) -> str:
    """The expression that hands the module its input ``name`` again (a sequence packed from its leaves)."""
    if spec["kind"] != "seq":
        return name
    items = ", ".join(n for n, _ in _leaves(name, spec)) + ("," if len(spec["items"]) == 1 else "")
    return f"({items})" if spec["type"] == "tuple" else f"[{items}]"


def _named_inputs(m: ModuleTime) -> list[tuple[str, dict[str, Any]]]:
    return [(f"x{i}", s) for i, s in enumerate(m.inputs["args"])] + list(m.inputs["kwargs"].items())


def _get_inputs(m: ModuleTime, precision: str) -> str:
    items = [_tensor_expr(leaf, precision) for name, s in _named_inputs(m) for _, leaf in _leaves(name, s)]
    return "def get_inputs():\n    return [" + ", ".join(items) + "]\n"


def _in(precision: str) -> str:
    return "" if precision == "fp32" else f" in {precision} (verify it with --precision {precision})"


def _param_dtypes(m: ModuleTime, profile: WorkloadProfile) -> list[str]:
    return sorted({_as_written(d, profile.precision) for d in m.param_dtypes})


def _header(m: ModuleTime, profile: WorkloadProfile) -> str:
    return (f'"""Region `{m.path}` ({m.type}) of {Path(profile.model).name}: {m.share * 100:.1f}% of its operator '
            f'time on {profile.device}{_in(profile.precision)}, at the shapes of its first call ({m.calls} per '
            f'forward).\n'
            f'Extracted by `kforge workload extract`."""\n')


def _class_region(m: ModuleTime, model_source: str, profile: WorkloadProfile) -> str:
    """The module's own class, renamed Model, and what it needs of the model file."""
    body = closure(model_source, m.type, where=profile.model)
    if "Model" in module_names(body) - {m.type}:
        raise SourceError(f"{profile.model}: class {m.type} needs the model's own `Model`")
    body = rename(body, {m.type: "Model"})
    init = "def get_init_inputs():\n    return [" + ", ".join(m.init_args or []) + "]\n"
    return f"{_header(m, profile)}{body}\n\n\n{_get_inputs(m, profile.precision)}\n\n{init}"


def _wrapper_region(m: ModuleTime, model_source: str, profile: WorkloadProfile) -> tuple[str, str]:
    """A Model holding the module as one attribute; returns (source, the attribute's name)."""
    attr = _slug(m.path.rsplit(".", 1)[-1]).lower()
    attr = attr if attr.isidentifier() and not attr[0].isdigit() else f"m_{attr}"
    parts = ["import torch", "import torch.nn as nn", *(f"import {i}" for i in profile.imports)]
    if m.in_model:
        parts.append(closure(model_source, m.type, where=profile.model))
    ctor = m.ctor
    dtypes = [d for d in _param_dtypes(m, profile) if d != "torch.float32"]
    if len(m.param_dtypes) == 1 and dtypes:
        ctor = f"{ctor}.to({dtypes[0]})"
    named = _named_inputs(m)
    params = ", ".join(["self", *(leaf for name, s in named for leaf, _ in _leaves(name, s))])
    n_args = len(m.inputs["args"])
    call = ", ".join([_packed(name, s) for name, s in named[:n_args]]
                     + [f"{name}={_packed(name, s)}" for name, s in named[n_args:]])
    parts.append(f"class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                 f"        self.{attr} = {ctor}\n\n    def forward({params}):\n        return self.{attr}({call})")
    init = "def get_init_inputs():\n    return []\n"
    inputs = _get_inputs(m, profile.precision)
    return f"{_header(m, profile)}" + "\n\n\n".join(parts) + f"\n\n\n{inputs}\n\n{init}", attr


def region_source(m: ModuleTime, model_source: str, profile: WorkloadProfile) -> tuple[str, str, tuple[str, str]]:
    """(source, style, weights) of the problem file for module ``m``."""
    prefix = m.path + "."
    plain_dtype = all(d == "torch.float32" for d in _param_dtypes(m, profile))
    packs = any(s["kind"] == "seq" for s in m.inputs["args"])  # the class's own forward would take the sequence
    if m.in_model and m.init_args is not None and not m.inputs["kwargs"] and plain_dtype and not packs:
        try:
            return _class_region(m, model_source, profile), "class", ("", prefix)
        except SourceError:
            pass  # a wrapper holds it instead
    source, attr = _wrapper_region(m, model_source, profile)
    return source, "wrapper", (attr + ".", prefix)


def extract(profile: WorkloadProfile, problem: Problem, out_dir: str | Path, *, top: int | None = None,
            cover: float = 0.8, min_share: float = 0.0) -> Workload:
    """Write the chosen regions of ``problem``'s model into ``out_dir`` with `workload.json`; return it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen, skipped = choose(profile, top=top, cover=cover, min_share=min_share)
    if not chosen:
        raise WorkloadError(f"{profile.model}: no module can be a region ("
                            + "; ".join(f"{s['path'] or '(model)'}: {s['why']}" for s in skipped[:5]) + ")")
    regions = []
    for i, m in enumerate(chosen, 1):
        source, style, weights = region_source(m, problem.source, profile)
        name = f"{i}_{_slug(m.path)}_{m.type}"
        (out / f"{name}.py").write_text(source)
        load_problem_file(out / f"{name}.py")  # a region that does not parse as a problem is our bug: say so now
        same = builtin_equivalent(source)
        regions.append(Region(name=name, file=f"{name}.py", path=m.path, type=m.type, style=style, share=m.share,
                              time_ms=m.total_ms, calls=m.calls, inputs=list(m.inputs["args"]),
                              init_args=list(m.init_args or []) if style == "class" else [], weights=weights,
                              equivalent=same.key if same is not None else None))
    workload = Workload(model=str(Path(problem.path).resolve()) if problem.path else problem.key,
                        backend=profile.backend, device=profile.device, size=problem.size,
                        total_ms=profile.total_ms, regions=regions, coverage=sum(r.share for r in regions),
                        skipped=skipped, precision=profile.precision, root=str(out))
    workload.save(out)
    return workload


def identity_candidate(region_source: str) -> str:
    """The region's own Model renamed ModelNew, calling PyTorch as it does: a candidate that must verify."""
    return rename(strip_entry_points(region_source), {"Model": "ModelNew"})
