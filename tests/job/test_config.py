"""The typed job config: one strict dataclass per Hydra group, composed into `JobConfig`."""

import ast
import dataclasses
import inspect
import textwrap

import pytest

from kforge import REPO_DIR
from kforge.apps.hydra_conf import compose
from kforge.errors import ConfigError, KforgeError
from kforge.job.config import (
    AnalysisConfig,
    BackendConfig,
    JobConfig,
    ProblemsConfig,
    ProfilerConfig,
    TablesConfig,
    TrackingConfig,
    WorkersConfig,
)
from kforge.job.reference import ReferenceConfig
from kforge.llm import ModelConfig, make_model
from kforge.loop import LoopConfig
from kforge.strict import StrictConfig
from kforge.verify import StaticConfig, TimingConfig, VerifyConfig
from kforge.workload.config import WorkloadConfig

CLASSES = [AnalysisConfig, BackendConfig, JobConfig, LoopConfig, ModelConfig, ProblemsConfig, ProfilerConfig,
           ReferenceConfig, StaticConfig, TablesConfig, TimingConfig, TrackingConfig, VerifyConfig, WorkersConfig]
#: The config class of each Hydra group of conf/ that is a key of the job (experiment and hydra are not).
GROUPS = {"analysis": AnalysisConfig, "backend": BackendConfig, "loop": LoopConfig, "model": ModelConfig,
          "problems": ProblemsConfig, "profiler": ProfilerConfig, "reference": ReferenceConfig,
          "tracking": TrackingConfig, "verify": VerifyConfig, "workload": WorkloadConfig}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_field_is_strict_and_documented(cls):
    assert issubclass(cls, StrictConfig) and dataclasses.is_dataclass(cls)
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    documented = {stmt.target.id for stmt, nxt in zip(body, body[1:] + [None])
                  if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr)
                  and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)}
    fields = {f.name for f in dataclasses.fields(cls)}
    assert fields - documented == set(), f"{cls.__name__}: fields without a docstring"


def test_every_group_has_a_class_and_every_choice_composes_into_the_job():
    # precision: a choice that sets verify.precision (`# @package verify`), not a group of the job's own
    groups = {p.name for p in (REPO_DIR / "conf").iterdir() if p.is_dir()} - {"experiment", "hydra", "precision"}
    assert groups == set(GROUPS) and set(GROUPS) <= {f.name for f in dataclasses.fields(JobConfig)}
    for path in sorted((REPO_DIR / "conf" / "precision").glob("*.yaml")):
        assert JobConfig.from_hydra(compose("synthesize", [f"precision={path.stem}"])).verify.precision == path.stem
    for group, cls in GROUPS.items():
        for path in sorted((REPO_DIR / "conf" / group).glob("*.yaml")):
            extra = ["model.name=openai/gpt-5"] if path.stem == "litellm" else []
            job = JobConfig.from_hydra(compose("synthesize", [f"{group}={path.stem}", *extra]))
            assert isinstance(getattr(job, group), cls), (group, path.stem)
    tables = TablesConfig.from_hydra(compose("tables", []))
    assert tables.baseline == "eager" and "single_vs_iterative" in tables.ablations


def test_the_default_job_reads_as_the_yaml_says():
    job = JobConfig.from_hydra(compose("synthesize", ["verify.static.deny=[foo]", "analysis=llm",
                                                      "analysis.model={name: mini, model: openai/gpt-5-mini}"]))
    assert job.model.kind == "oracle" and job.backend.name == "cpu" and job.problems.levels == [1]
    assert job.verify.timing.budget_s == 10.0 and job.verify.static.deny == ["foo"] and job.resume is True
    assert job.analysis.model == ModelConfig(name="mini", model="openai/gpt-5-mini")
    assert job.workers.spare is True and job.tracking.experiment == "kforge"
    lenient = JobConfig.from_hydra(compose("synthesize", ["verify.require_kernel=false"])).verify
    assert lenient.require_kernel is False and lenient.static.require_kernel is False  # the static rules follow


def test_an_unknown_key_names_its_path_and_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        VerifyConfig.from_dict({"trials": 2, "timing": {"budgt_s": 1}}, "verify")
    msg = str(err.value)
    assert msg.startswith("unknown setting verify.timing.budgt_s ") and "budget_s" in msg and "warmup" in msg
    with pytest.raises(ConfigError, match=r"unknown settings model\.nme, model\.tempreature \(valid under model: "):
        JobConfig.from_dict({"model": {"name": "x", "nme": "y", "tempreature": 0}})
    with pytest.raises(ConfigError, match="unknown setting colour .*valid under the top level: analysis, backend"):
        JobConfig.from_dict({"model": {"name": "x"}, "colour": "red"})


def test_values_the_dataclass_refuses_and_missing_ones_are_config_errors():
    with pytest.raises(ConfigError, match="^loop.mode must be single_shot, iterative or beam, not 'twice'$"):
        LoopConfig.from_dict({"mode": "twice"}, "loop")
    with pytest.raises(ConfigError, match="^model.name must be set$"):
        JobConfig.from_dict({"model": {"kind": "oracle"}})
    with pytest.raises(ConfigError, match="verify.timing must be a mapping"):
        VerifyConfig.from_dict({"timing": 3}, "verify")
    with pytest.raises(ConfigError, match="set verify.require_kernel instead"):
        VerifyConfig.from_dict({"static": {"require_kernel": False}}, "verify")
    with pytest.raises(ConfigError, match="^verify.static.require_kernel is not a setting of its own"):
        JobConfig.from_dict({"model": {"name": "x"}, "verify": {"static": {"require_kernel": False}}})


def test_nulls_keep_defaults_and_an_empty_analysis_model_reuses_the_generation_model():
    assert VerifyConfig.from_dict({"timing": None}).timing == TimingConfig()
    assert AnalysisConfig.from_dict({"kind": "llm", "model": {}}).model is None
    assert AnalysisConfig.from_dict({"kind": "llm", "model": None}).model is None


def test_verify_config_round_trips_with_its_static_lists():
    """The worker rebuilds the VerifyConfig from its dict: nothing of verify.static may be lost on the way."""
    cfg = VerifyConfig(require_kernel=False, static=StaticConfig(deny=["a"], allow=["b"], warn_only=["c"],
                                                                 disabled=["d"]))
    again = VerifyConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.static.require_kernel is False and again.static.deny == ["a"]
    assert dataclasses.replace(again, require_kernel=True).static.require_kernel is True  # one switch, followed


def test_a_misspelt_model_setting_is_no_longer_dropped():
    with pytest.raises(ConfigError, match="model.temprature"):
        make_model({"name": "s", "kind": "scripted", "temprature": 0.2})
    assert make_model({"name": "s", "kind": "scripted", "replies": ["x"]}).config.replies == ["x"]


def test_kforge_errors_share_a_base_and_keep_their_homes():
    from kforge.backends.build import CompilationError
    from kforge.cli import UsageError
    from kforge.evaluate import EvalInputError
    from kforge.job.pipeline import ConfigError as PipelineConfigError
    from kforge.job.reference import ReferenceTransferError
    from kforge.llm import LLMError, MissingAPIKey
    from kforge.problems import ProblemError
    from kforge.profile.base import ProfilerUnavailable
    from kforge.profile.ncu import NcuError
    from kforge.sandbox.pool import WorkerLost
    from kforge.verify.verifier import BackendUnavailable
    assert PipelineConfigError is ConfigError and issubclass(ConfigError, ValueError)
    for cls in (CompilationError, UsageError, EvalInputError, LLMError, MissingAPIKey, ProblemError,
                ProfilerUnavailable, NcuError, ReferenceTransferError, WorkerLost, BackendUnavailable):
        assert issubclass(cls, KforgeError), cls
    # Their old builtin bases stay, so existing `except ValueError/RuntimeError` still catch them.
    assert issubclass(ProblemError, ValueError) and issubclass(WorkerLost, RuntimeError)
    assert issubclass(LLMError, RuntimeError) and issubclass(ReferenceTransferError, ValueError)


def test_a_value_of_the_wrong_type_names_the_key_and_the_type():
    with pytest.raises(ConfigError, match=r"^loop\.iterations must be an integer, not 'abc'$"):
        JobConfig.from_hydra(compose("synthesize", ["loop.iterations=abc"]))
    with pytest.raises(ConfigError, match=r"^problems\.levels must be an integer or a list \(or null\), not 'one'$"):
        JobConfig.from_hydra(compose("synthesize", ["problems.levels=one"]))
    job = JobConfig.from_hydra(compose("synthesize", ["problems.ids=1-3", "loop.target_speedup=2"]))
    assert job.problems.ids == "1-3" and job.loop.target_speedup == 2  # an integer is a number


@pytest.mark.parametrize("override, message", [
    ("profiler.kind=vtune", "profiler.kind must be one of auto, none, torch, ncu, nsys, not 'vtune'"),
    ("analysis.kind=oracle", "analysis.kind must be one of off, rules, llm, not 'oracle'"),
    ("backend.name=metal", "backend.name must be one of cpu, cuda, triton, opencl, cute, tilelang, not 'metal'"),
    ("problems.source=web", "problems.source must be one of builtin, kernelbench, huggingface, not 'web'"),
    ("problems.size=huge", "problems.size must be one of null, cpu, gpu, default, not 'huge'"),
    ("reference.kind=psychic", "reference.kind must be one of none, oracle, mlflow, not 'psychic'"),
])
def test_a_value_outside_its_choices_is_refused_when_the_config_is_read(override, message):
    with pytest.raises(ConfigError) as err:
        JobConfig.from_hydra(compose("synthesize", [override]))
    assert str(err.value) == message


@pytest.mark.parametrize("override", ["loop.iteratons=3", "+loop.iteratons=3"])
def test_a_misspelt_key_with_or_without_plus_names_the_valid_ones(override):
    from kforge.job.config import check_overrides
    with pytest.raises(ConfigError, match=r"^unknown setting loop\.iteratons \(valid under loop: beam, .*iterations"):
        check_overrides([override])
    check_overrides(["-m", "loop=beam", "loop.iterations=3,5", "+experiment=demo", "backend.options.x=1",
                     "analysis.model.name=mini", "hydra.verbose=true", "--cfg", "job", "hydra/launcher=joblib",
                     "hydra.launcher.n_jobs=2", "+hydra.launcher.ray.init.num_cpus=2"])  # all valid
    with pytest.raises(ConfigError, match=r"^unknown setting loop/nonsense"):
        check_overrides(["loop/nonsense=x"])


def test_the_profiler_runs_under_the_jobs_verify_settings(tmp_path):
    from kforge.agents import ProfilingAdvisor
    from kforge.backends import get_backend
    from kforge.problems import load_builtin
    from kforge.profile import ProfilerUnavailable
    from kforge.verify import State, Verdict

    class Recording:
        def run(self, problem, code, backend, config=None):
            self.config = config
            raise ProfilerUnavailable("not here")

    job = JobConfig.from_hydra(compose("synthesize", ["verify.trials=7", "verify.atol=0.5"]))
    profiler = Recording()
    advisor = ProfilingAdvisor(get_backend("cpu"), profiler, "rules", tmp_path, render=False,
                               verify=job.verify.to_dict())
    problem = load_builtin(names=["level1/1_ReLU"], size="cpu")[0]
    advisor.recommend(problem, "code", Verdict(State.CORRECT, "ok"))
    assert VerifyConfig.from_dict(profiler.config) == job.verify and profiler.config["trials"] == 7
