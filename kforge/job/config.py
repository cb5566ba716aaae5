"""The job's configuration, typed: one dataclass per Hydra group of ``conf/``, composed into `JobConfig`.

Groups with a home elsewhere keep it, next to the code that reads them: ``model`` is
`kforge.llm.ModelConfig`, ``loop`` `kforge.loop.LoopConfig`, ``verify`` `kforge.verify.VerifyConfig`
(with ``verify.timing`` and ``verify.static``), ``reference`` `kforge.job.reference.ReferenceConfig`. The
others are here. ``conf/experiment`` files only override other groups, and ``conf/hydra`` is Hydra's
own; neither is a key of the job. Every class reads its dict through `kforge.strict.from_dict`, so a
misspelt key (``+verify.trails=3``) stops the job with a `ConfigError` naming the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..llm.base import ModelConfig
from ..loop import LoopConfig
from .reference import ReferenceConfig
from ..strict import StrictConfig
from ..verify.config import VerifyConfig
from ..workload.config import WorkloadConfig


@dataclass
class BackendConfig(StrictConfig):
    """The kernel language and device (``conf/backend/*.yaml``)."""

    name: str = "cpu"
    """``cpu`` (C++), ``cuda`` (CUDA C++) or ``triton``."""
    device: str | None = None
    """``cpu`` or ``cuda``; None for triton picks cuda when a GPU is visible, else Triton's interpreter."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the backend's constructor (kforge/backends/)."""


@dataclass
class ProblemsConfig(StrictConfig):
    """Which problems to run (``conf/problems/*.yaml``)."""

    source: str = "builtin"
    """``builtin`` (kforge's suite), ``kernelbench`` (a local checkout) or ``huggingface`` (the dataset)."""
    levels: Any = None
    """Levels to keep, e.g. ``[1, 2]`` (None: all)."""
    ids: Any = None
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

    @classmethod
    def from_hydra(cls, cfg: Any) -> "TablesConfig":
        data = dict(plain(cfg) or {})
        data.pop("hydra", None)
        return cls.from_dict(data)


def plain(cfg: Any) -> Any:
    """A DictConfig/ListConfig as plain dicts and lists, interpolations resolved; anything else as is."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


__all__ = ["AnalysisConfig", "BackendConfig", "JobConfig", "ProblemsConfig", "ProfilerConfig", "TablesConfig",
           "TrackingConfig", "WorkersConfig", "plain"]
