"""Cross-platform reference transfer: a working kernel for another accelerator, shown in the prompt.

``reference=oracle`` takes the built-in suite's hand-written solution for ``reference.backend``;
``reference=mlflow`` takes the best correct kernel of ``reference.backend`` for the same problem from an
MLflow experiment (``reference.experiment``) or one sweep job (``reference.run_id``). Any registered backend can
be the source for any other (cpu, cuda, triton, opencl, cute, tilelang: `transfer_pairs` lists them). A problem
with no reference runs without one and is tagged ``reference_available=false``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..agents import Reference
from ..backends import BACKENDS, get_backend
from ..errors import KforgeError
from ..problems import Problem, builtin_solution_path
from ..strict import StrictConfig

KINDS = ("none", "oracle", "mlflow")


def reference_backend(backend: str | None, target: str) -> str:
    """The backend references come from: ``reference.backend``, where ``auto`` (or unset) is cuda, or
    triton when the target is cuda."""
    source = backend or "auto"
    if source == "auto":
        return "triton" if target == "cuda" else "cuda"
    return source


class ReferenceTransferError(KforgeError, ValueError):
    """The reference configuration cannot work (unknown kind, same backend, missing experiment). Named so, not
    ``ReferenceError``, which is a Python builtin (a dead weak reference)."""


@dataclass
class ReferenceConfig(StrictConfig):
    """Where a reference implementation for another accelerator comes from (``conf/reference/*.yaml``)."""

    kind: str = "none"
    """``none``, ``oracle`` (the built-in suite's hand-written solutions) or ``mlflow`` (an earlier run's best)."""
    backend: str | None = "auto"
    """Whose kernels: a backend name, or ``auto`` (cuda, or triton when the target is cuda)."""
    experiment: str | None = None
    """For ``mlflow``: the experiment whose best correct kernels are taken."""
    run_id: str | None = None
    """For ``mlflow``: one sweep job's parent run instead of a whole experiment."""
    tracking_uri: str | None = None
    """For ``mlflow``: where that experiment is (None: the job's own tracking URI)."""

    def __post_init__(self) -> None:
        from ..tracking.store import tracking_uri  # x.db as SQLite; a folder refused now, not mid-job
        self.tracking_uri = tracking_uri(self.tracking_uri) if self.tracking_uri else None
        if self.kind not in KINDS:
            raise ValueError(f"reference.kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.backend not in (None, "auto", *BACKENDS):
            raise ValueError(f"reference.backend must be auto or a backend ({', '.join(BACKENDS)}), "
                             f"not {self.backend!r}")


def transfer_pairs(sources: list[str], targets: list[str]) -> list[tuple[str, str]]:
    """Every (source, target) pair of different backends: the reference-transfer matrix's cells."""
    for name in (*sources, *targets):
        if name not in BACKENDS:
            raise ReferenceTransferError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    return [(s, t) for t in targets for s in sources if s != t]


def load_references(rcfg: ReferenceConfig | dict[str, Any], problems: list[Problem], target: str,
                    tracking_uri: str | None = None, precision: str = "fp32",
                    backward: bool = False) -> dict[str, Reference | None]:
    """Per problem, a working kernel for another accelerator (or None): ``oracle`` references are the solutions
    for ``precision`` (its own folder first, then the backend's); with ``backward`` (``verify.backward``) a training
    step's: the oracle's backward solutions, or runs tagged ``pass=training``."""
    rcfg = ReferenceConfig.from_dict(rcfg, "reference")
    kind = rcfg.kind
    if kind == "none":
        return {p.key: None for p in problems}
    source = reference_backend(rcfg.backend, target)
    if source == target:
        raise ReferenceTransferError(f"reference.backend={source} is the target backend itself; pick another "
                                     "accelerator's kernels (e.g. reference.backend=cuda when targeting triton or cpu)")
    language = get_backend(source).language
    if kind == "oracle":
        out = {}
        for p in problems:
            # A reference is ported, not run at the precision: where no kernel of the source backend takes it
            # (cuda at fp16), its fp32 one is still a correct implementation to port from.
            path = builtin_solution_path(p, source, precision, backward) or builtin_solution_path(p, source, "fp32",
                                                                                                backward)
            out[p.key] = Reference(source, language, path.read_text(), "oracle") if path else None
        return out
    return _from_mlflow(rcfg, problems, source, language, tracking_uri, backward)


def _from_mlflow(rcfg: ReferenceConfig, problems: list[Problem], source: str, language: str,
                 uri: str | None, backward: bool = False) -> dict[str, Reference | None]:
    import tempfile
    from pathlib import Path

    from ..tracking import default_uri, open_client
    from ..tracking.schema import Files, Kind, Metrics, Tags, metric, metric_is, tag_is
    client = open_client(rcfg.tracking_uri or uri or default_uri())
    filters = [tag_is(Tags.BACKEND, source), tag_is(Tags.KIND, Kind.PROBLEM), metric_is(Metrics.BEST_CORRECT, 1)]
    if backward:  # a forward-only kernel has no backward to translate
        filters.append(tag_is(Tags.PASS, "training"))
    if rcfg.run_id:
        filters.append(tag_is(Tags.PARENT, rcfg.run_id))
        parent = client.get_run(rcfg.run_id)
        experiment_ids = [parent.info.experiment_id]
    else:
        name = rcfg.experiment
        if not name:
            raise ReferenceTransferError("reference=mlflow needs reference.experiment=NAME or reference.run_id=ID")
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise ReferenceTransferError(f"no MLflow experiment named {name!r} at {client.tracking_uri}")
        experiment_ids = [exp.experiment_id]
    runs = client.search_runs(experiment_ids, " and ".join(filters), max_results=50000)
    fastest = Metrics.best_speedup("eager")
    best: dict[str, Any] = {}
    for r in runs:
        key = r.data.tags.get(Tags.PROBLEM)
        s = metric(r.data.metrics, fastest) or 0.0
        if key and (key not in best or s > (metric(best[key].data.metrics, fastest) or 0.0)):
            best[key] = r
    out: dict[str, Reference | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in problems:
            r = best.get(p.key)
            if r is None:
                out[p.key] = None
                continue
            path = client.download_artifacts(r.info.run_id, Files.BEST_KERNEL, tmp)
            out[p.key] = Reference(source, language, Path(path).read_text(), f"mlflow:{r.info.run_id}")
    return out
