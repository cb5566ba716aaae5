"""Every job of every experiment sweep composes: a bad key surfaces here, not an hour into `make reproduce`."""

import itertools

import pytest
import yaml
from hydra import compose, initialize_config_dir

from kforge import REPO_DIR
from kforge.config import JobConfig

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
