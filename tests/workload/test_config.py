"""The ``workload`` group: its settings checked, ``workload=FILE.py`` made a choice Hydra composes."""

from __future__ import annotations

import pytest

from kforge.apps.hydra_conf import CONF_DIR, compose
from kforge.errors import ConfigError
from kforge.job.config import JobConfig
from kforge.workload.config import WorkloadConfig, workload_files


def test_default_is_an_ordinary_job_and_the_builtin_is_a_choice():
    assert JobConfig.from_hydra(compose("synthesize", [])).workload.model is None
    cfg = JobConfig.from_hydra(compose("synthesize", ["workload=transformer_block", "workload.top=3"])).workload
    assert cfg.model == "transformer_block" and cfg.top == 3


@pytest.mark.parametrize("value", ["/abs/dir with space/my_model.py", "models/my_model.py", "my_model.py"])
def test_a_model_file_is_a_choice_with_every_setting_overridable(value):
    cfg = JobConfig.from_hydra(compose("synthesize", [f"workload={value}", "workload.cover=0.5"])).workload
    assert cfg.model == value and cfg.cover == 0.5


def test_only_file_like_values_are_registered():
    found = workload_files(["workload=transformer_block", "workload=a/b.py", "model=oracle", "-m",
                            "workload=x.py,none"], CONF_DIR)
    assert found == ["a/b.py", "x.py"]


@pytest.mark.parametrize("bad, why", [({"cover": 0.0}, "workload.cover"), ({"top": 0}, "workload.top"),
                                      ({"model": " "}, "workload.model is empty"), ({"covr": 1}, "workload.covr")])
def test_bad_settings_are_named(bad, why):
    with pytest.raises(ConfigError, match=why):
        WorkloadConfig.from_dict(bad, "workload")
