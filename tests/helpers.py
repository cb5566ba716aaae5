"""Helpers shared by the tests."""

from __future__ import annotations

from pathlib import Path

from kforge.verify import TimingConfig, VerifyConfig

CANDIDATES = Path(__file__).parent / "candidates"


def fast_config(**overrides) -> VerifyConfig:
    """Few trials and short timing: the tests check behaviour, not speed."""
    # torch.compile of the reference has half of what the timing phase's limit leaves, and on a busy 2-core
    # machine inductor's C++ build alone can take a minute: a test that asks for the compile baseline checks that
    # it is there, not how fast it came, so it gets room (the limits only bound; a quiet machine is done sooner).
    room = bool(overrides.get("compile_ref"))
    timing = TimingConfig(warmup=1, min_trials=3, max_trials=6, budget_s=1.0, input_sets=2, recheck_every=2,
                          limit_s=600.0 if room else 60.0)
    # Shape variants cost a second worker request per correct verification: tests about them turn them on.
    base = dict(trials=2, compile_ref=False, timeout_s=900 if room else 120, timing=timing, variants=False)
    base.update(overrides)
    return VerifyConfig(**base)


def candidate(backend: str, name: str) -> str:
    return (CANDIDATES / backend / name).read_text()


#: Hydra overrides that make a pipeline job small and quick (one tiny problem, short timing).
FAST = ["problems.names=[level1/1_ReLU]", "problems.overrides={BATCH:8,DIM:4096}", "verify.trials=2",
        "verify.compile_ref=false", "verify.timing.min_trials=3", "verify.timing.max_trials=6",
        "verify.timing.budget_s=1", "verify.timing.warmup=1", "loop.concurrency=1"]


def config(tmp_path: Path, *overrides: str):
    """A composed ``synthesize`` config with `FAST` and an MLflow store in ``tmp_path``."""
    from kforge.apps.hydra_conf import compose
    return compose("synthesize", [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", *FAST, *overrides])


def fenced(name: str) -> str:
    """A model's reply carrying the cpu candidate ``name`` in a fenced block."""
    return f"Here is the program.\n```python\n{candidate('cpu', name)}```\n"


def scripted(*replies: str):
    """The scripted model, answering ``replies`` in turn."""
    from kforge.llm import ModelConfig, make_model
    return make_model(ModelConfig(name="scripted", kind="scripted", replies=list(replies)))
