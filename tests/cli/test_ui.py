"""``kforge ui``: the store it serves, the addresses it prints (looked up in that store), the ablation view."""

import json
import socket

import pytest

from kforge.cli import main
from kforge.job.console import closing_line
from kforge.report.browse import ABLATION_VIEW, ablation_state
from kforge.tracking import Tracker, open_client


def sweep(db, experiment: str, arms: dict[str, str]) -> Tracker:
    """A job per arm of a one-factor ablation, a problem run under each, as a sweep writes them."""
    tracker = Tracker(f"sqlite:///{db}", experiment)
    for loop_mode, name in arms.items():
        tags = {"loop_mode": loop_mode, "model": "oracle", "backend": "cpu"}
        parent = tracker.start_parent(name, {"loop": {"mode": loop_mode}}, f"loop: {loop_mode}\n", tags)
        for problem in ("level1/1_ReLU", "level1/2_Softmax"):
            tracker.start_problem(parent, problem, {**tags, "problem": problem, "level": "1"})
    return tracker


def test_addresses_come_from_the_named_store_from_any_directory(tmp_path, monkeypatch, capsys):
    db = tmp_path / "job" / "mlflow.db"
    Tracker(f"sqlite:///{db}", "kforge-first")  # takes an id, so the sweep's is not the first one
    tracker = sweep(db, "kforge-single_vs_iterative", {"single_shot": "a", "iterative": "b"})
    other = tmp_path / "elsewhere"
    other.mkdir()
    sweep(other / "mlflow.db", "kforge-single_vs_iterative", {"single_shot": "a"})  # another store, another id
    monkeypatch.chdir(other)
    for store in (str(db), str(db.parent), f"sqlite:///{db}"):
        assert main(["ui", "--store", store, "--print-only", "--port", "5077"]) == 0
        out = capsys.readouterr().out
        eid = tracker.experiment_id
        assert (f"by loop_mode (correctness, speedup): http://127.0.0.1:5077/#/experiments/{eid}/runs?"
                f"workflowType=machine_learning&viewStateShareKey={ABLATION_VIEW}") in out
        assert f"runs table: http://127.0.0.1:5077/#/experiments/{eid}/runs?" in out
        assert "kforge-first\n    by level" in out  # no jobs there: nothing varies, grouped by level
    view = json.loads(open_client(f"sqlite:///{db}").get_experiment(tracker.experiment_id)
                      .tags[f"mlflow.sharedViewState.{ABLATION_VIEW}"])
    state = json.loads(view["state"])
    assert state["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "loop_mode"}]
    assert state["selectedColumns"][:3] == ["tags.`loop_mode`", "metrics.`best_correct`",
                                           "metrics.`best_speedup_vs_eager`"]
    assert state["searchFilter"] == "tags.`kforge.kind` = 'problem'" and view["name"] == "kforge: problems by loop_mode"


def test_the_default_store_is_the_one_a_job_here_writes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["ui", "--print-only"]) == 2
    err = capsys.readouterr().err
    assert f"no MLflow store at {tmp_path / 'mlflow.db'}" in err and "--store" in err
    assert not (tmp_path / "mlflow.db").exists()  # looking made no empty store
    sweep(tmp_path / "mlflow.db", "kforge-x", {"single_shot": "a", "iterative": "b"})
    assert main(["ui", "--print-only"]) == 0 and "kforge-x\n    by loop_mode" in capsys.readouterr().out


def test_a_port_in_use_is_a_usage_error(tmp_path, capsys):
    sweep(tmp_path / "mlflow.db", "kforge-x", {"single_shot": "a"})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["ui", "--store", str(tmp_path), "--port", str(port)]) == 2
    assert f"port {port} is in use" in capsys.readouterr().err


def test_the_jobs_closing_line_names_the_command_and_the_view(tmp_path):
    tracker = sweep(tmp_path / "mlflow.db", "kforge-x", {"single_shot": "a", "iterative": "b"})
    line = closing_line(tracker)
    assert line.startswith(f"compare the runs: kforge ui --store {tmp_path / 'mlflow.db'}  (then http://127.0.0.1:5000/")
    assert f"#/experiments/{tracker.experiment_id}/runs?" in line and ABLATION_VIEW in line
    assert f"mlflow.sharedViewState.{ABLATION_VIEW}" in tracker.client.get_experiment(tracker.experiment_id).tags


@pytest.mark.parametrize("factor,group", [("model", "model"), (None, "level")])
def test_the_view_groups_by_the_factor(factor, group):
    state = ablation_state(factor)
    assert state["groupBy"]["groupByKeys"][0]["groupByData"] == group and state["selectedColumns"][0] == f"tags.`{group}`"
