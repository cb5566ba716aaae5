"""A workload ready for synthesis: its model resolved, its regions extracted (or an extraction reused), and
what a synthesis job hands back (each region's best correct kernel) kept beside ``workload.json``.

The folder a synthesis job works in holds ``workload.json`` and the region files (`extract`), ``profile.txt``,
``profile.png`` and ``profile.json``, and, once the job's loop is over, ``kernels/<region>.py`` with
``kernels.json`` (each solved region's speedup) and the assembled program with its verdict (`RESULT_JSON`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..problems import Problem, default_size, load_problem_file, resolve_problem
from .assemble import RegionKernel
from .extract import WORKLOAD_JSON, Workload, extract
from .profile import WorkloadError, plot, profile_model, render_table

BUILTIN_WORKLOADS = Path(__file__).resolve().parent.parent / "problems" / "builtin" / "workloads"
KERNELS_DIR = "kernels"
KERNELS_JSON = "kernels.json"
ASSEMBLED = "assembled.py"
RESULT_JSON = "result.json"
PROFILE_FILES = ("profile.txt", "profile.png", "profile.json")


def resolve_model(spec: str, size: str | None, device: str) -> Problem:
    """A model file, or the name of a built-in workload (``transformer_block``), at ``size`` (None: the device's)."""
    builtin = BUILTIN_WORKLOADS / f"{spec.removesuffix('.py')}.py"
    size = size or default_size(device)
    if not Path(spec).exists() and builtin.is_file():
        return load_problem_file(builtin, size=size)
    if not Path(spec).exists() and "/" not in spec and not spec.endswith(".py"):
        known = ", ".join(sorted(p.stem for p in BUILTIN_WORKLOADS.glob("*.py")))
        raise WorkloadError(f"no model file {spec!r} and no built-in workload of that name (built-in: {known})")
    return resolve_problem(spec, size=size)


def write_profile(profile, folder: Path) -> None:
    (folder / "profile.json").write_text(json.dumps(profile.to_dict(), indent=1))
    (folder / "profile.txt").write_text(render_table(profile) + "\n")
    try:
        plot(profile, folder / "profile.png")
    except ImportError:  # matplotlib is not installed (a bare GPU machine): the table says it all
        pass


def reusable(folder: Path, problem: Problem, backend: str, precision: str = "fp32") -> Workload | None:
    """The workload in ``folder`` if it is ``problem``'s model at its size on ``backend`` in ``precision``; None if
    there is none.

    A folder holding another model's workload is an error, not something to overwrite."""
    if not (folder / WORKLOAD_JSON).is_file():
        return None
    workload = Workload.load(folder)
    model = str(Path(problem.path).resolve()) if problem.path else problem.key
    if (workload.model, workload.size, workload.backend, workload.precision) != (model, problem.size, backend,
                                                                                 precision):
        raise WorkloadError(f"{folder} holds the workload of {workload.model} (size {workload.size}, backend "
                            f"{workload.backend}, {workload.precision}), not of {model} (size {problem.size}, "
                            f"backend {backend}, {precision}): choose another workload.dir")
    return workload


def prepare(problem: Problem, backend, pool, folder: str | Path, *, top: int | None = None, cover: float = 0.8,
            min_share: float = 0.0, iterations: int = 3, precision: str = "fp32") -> tuple[Workload, bool]:
    """(the workload of ``problem``'s model in ``folder``, whether an earlier extraction there was reused).

    Without one, the model is profiled in ``precision`` in a worker of ``pool`` and its regions extracted into
    ``folder``."""
    from ..verify import VerifyConfig
    folder = Path(folder)
    name = getattr(backend, "name", backend)
    found = reusable(folder, problem, name, precision)
    if found is not None:
        return found, True
    profile = profile_model(problem, backend, pool, iterations=iterations, config=VerifyConfig(precision=precision))
    workload = extract(profile, problem, folder, top=top, cover=cover, min_share=min_share)
    write_profile(profile, folder)
    return workload, False


def region_problems(workload: Workload) -> list[Problem]:
    """Each region's problem file, as the job's problems (in the workload's order, hottest first)."""
    return [workload.load_region(r) for r in workload.regions]


def save_kernels(workload: Workload, kernels: dict[str, RegionKernel]) -> Path:
    """Each solved region's kernel as ``kernels/<region>.py`` and their speedups in ``kernels.json``."""
    folder = Path(workload.root) / KERNELS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name, k in kernels.items():
        (folder / f"{name}.py").write_text(k.source)
    (folder / KERNELS_JSON).write_text(json.dumps({n: {"speedup": k.speedup} for n, k in kernels.items()}, indent=1))
    return folder

