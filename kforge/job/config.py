"""The job's configuration, typed: one dataclass per Hydra group of ``conf/``, composed into `JobConfig`.

Groups with a home elsewhere keep it, next to the code that reads them: ``model`` is
`kforge.llm.ModelConfig`, ``loop`` `kforge.loop.LoopConfig`, ``verify`` `kforge.verify.VerifyConfig`
(with ``verify.timing`` and ``verify.static``), ``reference`` `kforge.job.reference.ReferenceConfig`. The
others are here. ``conf/experiment`` files only override other groups, and ``conf/hydra`` is Hydra's
own; neither is a key of the job. Every class reads its dict through `kforge.strict.from_dict`, so a
misspelt key (``+verify.trails=3``) stops the job with a `ConfigError` naming the valid ones, a value of
the wrong type with one naming the type, and a value outside a field's choices (checked in the class's
``__post_init__``) with one naming the choices: all before anything starts. `check_overrides` answers a
misspelt key on the command line the same way before Hydra composes (Hydra would say "not in struct").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agents.analysis import ANALYSES
from ..backends import BACKENDS
from ..errors import ConfigError
from ..llm.base import ModelConfig
from ..loop import LoopConfig
from ..metrics import BASELINES
from ..problems import SIZES
from ..profile import PROFILERS
from ..strict import StrictConfig
from ..verify.config import VerifyConfig
from ..workload.config import WorkloadConfig
from .reference import ReferenceConfig

SOURCES = ("builtin", "kernelbench", "huggingface")


def out_dir_problem(out_dir: str, option: str) -> str | None:
    """Why the tables cannot be written under ``out_dir`` (None: they can): it, or a folder above it, is a file.
    Asked before any work, since the tables are written last (`kforge-reproduce`: after every sweep)."""
    path = Path(out_dir).expanduser()
    for folder in (path, *path.parents):
        if folder.exists():
            if folder.is_dir():
                return None
            said = "is a file" if folder == path else f"is under {folder}, a file"
            return f"{option} {out_dir}: {said}; the tables and plots go into a folder, so name a folder"
    return None


def _store(uri: str | None) -> str | None:
    """A tracking URI as `kforge.tracking.store.tracking_uri` takes it (``x.db``: SQLite), or None; a folder or a
    plain path is refused now, in one line, not by MLflow after the job has started its workers."""
    from ..tracking.store import tracking_uri
    return tracking_uri(uri) if uri else None


def _one_of(key: str, value: Any, choices: Any) -> None:
    if value not in choices:
        raise ValueError(f"{key} must be one of {', '.join('null' if c is None else str(c) for c in choices)}, "
                         f"not {value!r}")


@dataclass
class BackendConfig(StrictConfig):
    """The kernel language and device (``conf/backend/*.yaml``)."""

    name: str = "cpu"
    """``cpu`` (C++), ``cuda`` (CUDA C++), ``triton``, ``opencl`` (OpenCL C), ``cute`` (CuTe DSL) or ``tilelang``."""
    device: str | None = None
    """``cpu`` or ``cuda``; None for triton picks cuda when a GPU is visible, else Triton's interpreter."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the backend's constructor (kforge/backends/)."""

    def __post_init__(self) -> None:
        _one_of("backend.name", self.name, tuple(BACKENDS))
        _one_of("backend.device", self.device, (None, "cpu", "cuda"))


@dataclass
class ProblemsConfig(StrictConfig):
    """Which problems to run (``conf/problems/*.yaml``)."""

    source: str = "builtin"
    """``builtin`` (kforge's suite), ``kernelbench`` (a local checkout) or ``huggingface`` (the dataset)."""
    levels: int | list[int] | None = None
    """Levels to keep, e.g. ``[1, 2]`` (None: all)."""
    ids: int | str | list[int | str] | None = None
    """Problem ids to keep within each level, e.g. ``[1, 5]`` or ``1-10`` (None: all)."""
    names: list[str] | None = None
    """Problem keys or names to keep, e.g. ``[level1/1_ReLU]`` (None: all)."""
    size: str | None = None
    """Size preset; None: the cpu preset on the cpu device, the gpu preset on GPUs."""
    overrides: dict[str, Any] | None = None
    """Single module constants to replace in every problem, e.g. ``{BATCH: 8}``."""
    root: str | None = None
    """For ``kernelbench``: the checkout (``KERNELBENCH_DIR`` in the shipped configs)."""
    limit: int | None = None
    """Keep only the first this many problems."""
    dataset: str | None = None
    """For ``huggingface``: the dataset (None: ScalingIntelligence/KernelBench)."""

    def __post_init__(self) -> None:
        _one_of("problems.source", self.source, SOURCES)
        _one_of("problems.size", self.size, (None, *SIZES))
        if self.limit is not None and self.limit < 1:
            raise ValueError("problems.limit must be at least 1 (or null: every problem)")


@dataclass
class ProfilerConfig(StrictConfig):
    """What profiles a correct kernel before an optimisation pass (``conf/profiler/*.yaml``)."""

    kind: str = "none"
    """``none``, ``auto``, ``ncu``, ``nsys`` or ``torch``."""
    iterations: int = 3
    """Profiled calls of the candidate's forward."""
    timeout_s: float = 600.0
    """Wall-clock limit of one profile."""
    metrics: list[str] | None = None
    """For ``ncu``: metric names replacing kforge's set (kforge/profile/ncu.py)."""

    def __post_init__(self) -> None:
        _one_of("profiler.kind", self.kind, ("auto", *PROFILERS))
        if self.iterations < 1 or self.timeout_s <= 0:
            raise ValueError("profiler.iterations must be at least 1 and profiler.timeout_s positive")


@dataclass
class AnalysisConfig(StrictConfig):
    """Who turns a profile into a recommendation (``conf/analysis/*.yaml``)."""

    kind: str = "off"
    """``off`` (a generic "make it faster"), ``rules`` (rule-based, no LLM) or ``llm``."""
    model: ModelConfig | None = None
    """For ``llm``: the analyst's model (None: the generation model), e.g. ``{name: gpt-5-mini, ...}``."""
    visual: bool = False
    """For ``llm``: send the digest as a PNG (the model must be ``multimodal: true``)."""
    raw_metrics: bool = False
    """For ``llm``: add the top kernel's raw metrics to the prompt."""

    def __post_init__(self) -> None:
        _one_of("analysis.kind", self.kind, ANALYSES)


@dataclass
class TrackingConfig(StrictConfig):
    """Where the job's runs go (``conf/tracking/default.yaml``)."""

    uri: str | None = None
    """MLflow tracking URI (None: ``sqlite:///mlflow.db`` in the directory you start from)."""
    experiment: str | None = "kforge"
    """MLflow experiment name (None: ``kforge``)."""
    artifact_root: str | None = None
    """Artifact location of a new experiment (None: MLflow's default)."""
    autolog_llm: bool = False
    """Trace every LLM call with ``mlflow.litellm.autolog()``."""

    def __post_init__(self) -> None:
        self.uri = _store(self.uri)


@dataclass
class WorkersConfig(StrictConfig):
    """The verifier's worker processes (``workers:`` in ``conf/synthesize.yaml``)."""

    build: int | None = None
    """Build slots on the CPU (None: kforge's default for this machine)."""
    gpus: list[int] | None = None
    """Which GPUs the verifier may use (None: every visible GPU)."""
    spare: bool = True
    """Each GPU worker keeps its next candidate's process ready, CUDA context made."""


@dataclass
class JobConfig(StrictConfig):
    """One ``kforge-synthesize`` job: every group of ``conf/synthesize.yaml``, typed."""

    model: ModelConfig
    """The generation model (``conf/model/*.yaml``)."""
    backend: BackendConfig = field(default_factory=BackendConfig)
    """The kernel language and device."""
    problems: ProblemsConfig = field(default_factory=ProblemsConfig)
    """Which problems."""
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)
    """A working implementation for another accelerator in the prompt."""
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    """Profiling before optimisation passes."""
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    """The analysis agent."""
    loop: LoopConfig = field(default_factory=LoopConfig)
    """Single-shot or iterative, and its budget."""
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    """The verifier's settings."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """MLflow."""
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    """Worker processes."""
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    """Whole-workload mode: a model's hot regions as the problems (``conf/workload/``; none: an ordinary job)."""
    resume: bool = True
    """Continue an interrupted job with the same configuration; false always starts afresh."""
    prompts_dir: str | None = None
    """Where the prompt templates are (None: kforge's own prompts/)."""

    def __post_init__(self) -> None:
        if self.verify.trials < 1:  # 0 is the verifier's build check: a job's verdicts would judge nothing
            raise ValueError(f"verify.trials={self.verify.trials} must be at least 1")

    @classmethod
    def from_hydra(cls, cfg: Any) -> "JobConfig":
        """From Hydra's composed config (a DictConfig, or its plain dict); ``hydra:`` itself is left out."""
        data = dict(plain(cfg) or {})
        data.pop("hydra", None)
        return cls.from_dict(data)


@dataclass
class TablesConfig(StrictConfig):
    """``kforge-tables`` (``conf/tables.yaml``)."""

    tracking_uri: str | None = None
    """MLflow tracking URI (None: ``sqlite:///mlflow.db`` in the directory you start from)."""
    ablations: list[str] = field(default_factory=lambda: ["single_vs_iterative", "reference_transfer",
                                                           "profiling_ablation", "iterative_vs_beam"])
    """Which ablations' tables to build."""
    out_dir: str = "results"
    """Where the tables and plots go."""
    baseline: str = "eager"
    """What the speedups are measured against: ``eager`` or ``compile``."""
    resamples: int = 2000
    """Bootstrap resamples over problems for the intervals."""
    confidence: float = 0.95
    """Coverage of those intervals."""
    log_to_mlflow: bool = True
    """Also log the files as a ``tables`` run in each ablation's experiment."""

    def __post_init__(self) -> None:
        self.tracking_uri = _store(self.tracking_uri)
        from ..report.tables import ABLATIONS
        for name in self.ablations:
            _one_of("ablations", name, tuple(ABLATIONS))
        _one_of("baseline", self.baseline, BASELINES)
        if not 0 < self.confidence < 1 or self.resamples < 1:
            raise ValueError(f"confidence must be between 0 and 1 (not {self.confidence}) and resamples at least 1 "
                             f"(not {self.resamples})")
        if problem := out_dir_problem(self.out_dir, "out_dir"):
            raise ValueError(problem)

    @classmethod
    def from_hydra(cls, cfg: Any) -> "TablesConfig":
        data = dict(plain(cfg) or {})
        data.pop("hydra", None)
        return cls.from_dict(data)


#: Top-level command-line keys that are not settings of the job: Hydra's own, the experiment presets, and groups
#: whose choice sets another group's key (``precision=bf16`` sets ``verify.precision``).
NOT_JOB_KEYS = ("hydra", "experiment", "precision")


def _not_keys(root: type) -> list[str]:
    """The top-level keys that are no setting of ``root`` but valid on its command line."""
    return [*NOT_JOB_KEYS] if root is JobConfig else ["hydra"]


def check_overrides(overrides: list[str], root: type = JobConfig) -> None:
    """Answer a misspelt key among Hydra command-line ``overrides`` (``loop.iteratons=3``, with or without
    ``+``) with `ConfigError` naming the valid keys at that level, before Hydra composes; flags (``-m``) and
    a group's choice (``loop=beam``) pass, as does anything under a mapping field (``backend.options.x``) and
    Hydra's own settings and groups (``hydra/launcher=joblib``, ``hydra.launcher.n_jobs=2``)."""
    import typing

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ..strict import _dataclass_in, field_names
    given = [o for o in overrides if "=" in o and not o.startswith("-")]  # flags and their values pass
    for override in OverridesParser.create().parse_overrides(given):
        parts = re.split(r"[./]", override.key_or_group)  # a group's path too (hydra/launcher=joblib)
        if parts[0] in _not_keys(root):
            continue
        cls, where = root, ""
        for part in parts:
            if part not in field_names(cls):
                raise ConfigError(f"unknown setting {override.key_or_group} (valid under {where or 'the top level'}: "
                                  f"{', '.join(sorted(field_names(cls) + (_not_keys(root) if not where else [])))})")
            sub, _ = _dataclass_in(typing.get_type_hints(cls).get(part))
            if sub is None:
                break  # a value, or a mapping whose keys are free
            cls, where = sub, f"{where}.{part}" if where else part


def _sets_a_mapping(key: str, root: type) -> bool:
    """Whether ``key`` is a mapping field of ``root`` (``model.extra``) or a key under one (``model.extra.top_p``)."""
    import typing

    from ..strict import _dataclass_in, field_names
    cls: type | None = root
    for part in key.split("."):
        hint = typing.get_type_hints(cls).get(part) if part in field_names(cls) else None
        if hint is None:
            return False
        cls, _ = _dataclass_in(hint)
        if cls is None:  # a value, or a mapping (``dict[str, Any]``, ``dict[str, Any] | None``) whose keys are free
            return dict in (typing.get_origin(hint), *(typing.get_origin(a) for a in typing.get_args(hint)))
    return False


def free_mapping_overrides(overrides: list[str], root: type = JobConfig) -> list[str]:
    """``overrides`` with each one that sets a mapping field or a key under it (``model.extra.top_p=0.9``,
    ``model.extra={top_p: 0.9}``, ``backend.options.gpu=1``) made ``++`` (set, or add if new): Hydra locks the
    composed config, so a key a mapping does not hold yet was refused ("Key 'top_p' is not in struct") unless the
    user wrote ``+``, which in turn is refused where a config file already sets that key."""
    return [f"++{o}" if "=" in o and not o.startswith(("-", "+", "~")) and _sets_a_mapping(o.split("=", 1)[0], root)
            else o for o in overrides]


def plain(cfg: Any) -> Any:
    """A DictConfig/ListConfig as plain dicts and lists, interpolations resolved; anything else as is."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


__all__ = ["AnalysisConfig", "BackendConfig", "JobConfig", "check_overrides", "free_mapping_overrides", "ProblemsConfig", "ProfilerConfig", "TablesConfig",
           "TrackingConfig", "WorkersConfig", "plain"]
