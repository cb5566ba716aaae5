"""Every job of every experiment sweep composes: a bad key surfaces here, not an hour into `make reproduce`."""

import itertools

import pytest
import yaml
from hydra import compose, initialize_config_dir

from kforge import REPO_DIR
from kforge.job.config import JobConfig

EXPERIMENTS = sorted((REPO_DIR / "conf" / "experiment").glob("*.yaml"))


def jobs(path):
    params = ((yaml.safe_load(path.read_text()).get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    axes = [[f"{key}={value.strip()}" for value in str(values).split(",")] for key, values in params.items()]
    return [list(combo) for combo in itertools.product(*axes)]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_sweep_job_composes(path):
    with initialize_config_dir(config_dir=str(REPO_DIR / "conf"), version_base="1.3"):
        for overrides in jobs(path):
            cfg = compose("synthesize", overrides=[f"experiment={path.stem}", *overrides])
            assert cfg.backend.name and cfg.model.name, overrides
            JobConfig.from_hydra(cfg)  # every key is one the job's typed config knows (strict)


def test_the_ablations_sweep_what_they_compare():
    assert len(jobs(REPO_DIR / "conf" / "experiment" / "reference_transfer.yaml")) >= 6  # none/oracle x 3 levels
    loops = {o for job in jobs(REPO_DIR / "conf" / "experiment" / "single_vs_iterative.yaml") for o in job}
    assert {"loop=single_shot", "loop=iterative"} <= loops


def test_iterative_vs_beam_compares_the_two_searches_at_one_model_call_budget():
    path = REPO_DIR / "conf" / "experiment" / "iterative_vs_beam.yaml"
    assert {o for job in jobs(path) for o in job} >= {"loop=iterative", "loop=beam"}
    budgets = {}
    with initialize_config_dir(config_dir=str(REPO_DIR / "conf"), version_base="1.3"):
        for loop in ("iterative", "beam"):
            cfg = compose("synthesize", overrides=[f"experiment={path.stem}", f"loop={loop}", "loop.iterations=7"])
            job = JobConfig.from_hydra(cfg)
            budgets[loop] = (job.loop.budget, cfg.analysis.name if "name" in cfg.analysis else cfg.analysis)
    assert budgets["iterative"] == budgets["beam"] and budgets["beam"][0] == 7


def test_the_backward_ablation_compares_the_forward_alone_with_a_training_step():
    path = REPO_DIR / "conf" / "experiment" / "backward_ablation.yaml"
    assert {o for job in jobs(path) for o in job} >= {"verify.backward=false", "verify.backward=true"}
    with initialize_config_dir(config_dir=str(REPO_DIR / "conf"), version_base="1.3"):
        arms = [JobConfig.from_hydra(compose("synthesize", overrides=[f"experiment={path.stem}", *job]))
                for job in jobs(path) if "problems=builtin_l1" in job]
    assert {a.verify.backward for a in arms} == {False, True}
    assert len({(a.loop.mode, a.analysis.kind, a.profiler.kind) for a in arms}) == 1  # only the pass differs


def test_the_precision_ablation_compares_fp32_with_bf16():
    path = REPO_DIR / "conf" / "experiment" / "precision_ablation.yaml"
    assert {o for job in jobs(path) for o in job} >= {"precision=fp32", "precision=bf16"}
    with initialize_config_dir(config_dir=str(REPO_DIR / "conf"), version_base="1.3"):
        arms = [JobConfig.from_hydra(compose("synthesize", overrides=[f"experiment={path.stem}", *job]))
                for job in jobs(path) if "problems=builtin_l1" in job]
    assert {a.verify.precision for a in arms} == {"fp32", "bf16"}
    assert len({(a.loop.mode, a.analysis.kind, a.verify.backward) for a in arms}) == 1  # only the precision differs
