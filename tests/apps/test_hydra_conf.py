"""Hydra's view of kforge's configs: an unknown choice is answered with the group's choices before Hydra composes,
and a refused job's folder is taken back."""

import pytest

from kforge.apps.hydra_conf import check_choices, discard_run_dir
from kforge.errors import ConfigError


@pytest.mark.parametrize("overrides", [
    ["model=oracle", "backend=cuda", "problems=builtin_l2", "experiment=demo"],
    ["model=openai/gpt-5"], ["model=hosted_vllm/Qwen/Qwen2.5-Coder-32B-Instruct"],  # litellm model strings
    ["workload=transformer_block"], ["workload=my_model.py"], ["experiment=null"], ["~experiment"],
    ["-m", "loop=single_shot,iterative"], ["hydra/launcher=joblib"], ["loop.iterations=3", "model.cache=false"],
])
def test_valid_choices_pass(overrides):
    check_choices(overrides)


@pytest.mark.parametrize("overrides, says", [
    (["backend=metal"], "unknown choice backend=metal; valid backend choices: cpu, cuda, cute, opencl, tilelang, triton"),
    (["-m", "backend=cpu,cudaa"], "unknown choice backend=cudaa (did you mean backend=cuda?)"),
    (["model=gtp-5"], "valid model choices: claude-opus, gpt-5, litellm, ollama, oracle, scripted, vllm, or any "
                      "litellm model string"),
    (["+experiment=nope"], "unknown choice experiment=nope"),
    (["loop=beem"], "(did you mean loop=beam?)"),
])
def test_an_unknown_choice_names_the_groups_choices(overrides, says):
    with pytest.raises(ConfigError) as err:
        check_choices(overrides)
    assert says in str(err.value)


def test_a_refused_jobs_folder_is_taken_back_and_nothing_else(tmp_path):
    kept = tmp_path / "outputs" / "2026-01-01" / "09-00-00"
    kept.mkdir(parents=True)
    (kept / "synthesize.log").write_text("an earlier job's log\n")
    refused = tmp_path / "outputs" / "2026-01-01" / "10-00-00"
    (refused / ".hydra").mkdir(parents=True)
    (refused / ".hydra" / "config.yaml").write_text("resume: true\n")
    (refused / "synthesize.log").write_text("")
    discard_run_dir(refused, tmp_path)
    assert not refused.exists() and kept.is_dir()  # the day's folder holds another job: it stays
    discard_run_dir(kept, tmp_path)
    assert list(tmp_path.iterdir()) == []  # emptied up to where the command was started, not further
    worked = tmp_path / "outputs" / "a"
    worked.mkdir(parents=True)
    (worked / "workload.json").write_text("{}")  # a job that wrote something of its own is not touched
    discard_run_dir(worked, tmp_path)
    assert (worked / "workload.json").is_file()



def test_a_sweep_over_models_checks_every_models_key_before_its_first_job(monkeypatch):
    """`-m model=oracle,gpt-5` ran the oracle's job in full, then stopped at gpt-5's missing key."""
    import pytest

    from kforge.apps.synthesize import check_swept_models
    from kforge.errors import ConfigError
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY.*checked before the sweep's first job"):
        check_swept_models(["-m", "model=oracle,gpt-5", "problems.ids=1"])
    check_swept_models(["-m", "model=oracle,vllm"])  # no key to set: a local server
    check_swept_models(["model=gpt-5"])  # one job: its own start says so
    check_swept_models(["-m", "model=oracle,gpt-5", "model.api_key_env=MY_KEY"])  # set per job


@pytest.mark.parametrize("how", [["--config-dir", "{d}"], ["--config-dir={d}"], ["-cd", "{d}"],
                                 ["hydra.searchpath=[file://{d}]"], ["hydra.searchpath=[pkg://x.y,'{d}']"]])
def test_a_choice_from_a_config_folder_the_user_adds_passes(tmp_path, how):
    """``--config-dir myconf model=myscript`` (myconf/model/myscript.yaml) was refused as an unknown choice: only
    kforge's own conf/ was looked at, though Hydra itself finds the file."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "myscript.yaml").write_text("name: myscript\nkind: scripted\n")
    flags = [a.format(d=tmp_path) for a in how]
    check_choices([*flags, "model=myscript"])
    with pytest.raises(ConfigError, match="valid model choices: claude-opus, gpt-5, litellm, myscript, ollama"):
        check_choices([*flags, "model=myscrip"])
    with pytest.raises(ConfigError, match="unknown choice model=myscript"):
        check_choices(["model=myscript"])  # without the folder, Hydra would not find it either
