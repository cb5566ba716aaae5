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
    assert state["groupBy"] == {"aggregateFunction": "max", "groupByKeys": [{"mode": "tag", "groupByData": "loop_mode"}]}
    assert state["selectedColumns"][:4] == ["params.`loop_mode`", "metrics.`arm_correctness_rate`",
                                           "metrics.`arm_fast_1`", "metrics.`arm_geomean_speedup_vs_eager`"]
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
    assert state["groupBy"]["groupByKeys"][0]["groupByData"] == group and state["selectedColumns"][0] == f"params.`{group}`"


def test_every_problem_run_carries_its_arms_figures_as_the_tables_count_them(tmp_path):
    """MLflow's group row can take only the min, mean or max of a column: with the arm's figures alike on every run
    of the arm, its max is the tables' figure (a geomean, not a mean; four digits, no float noise)."""
    from kforge.report.browse import _problem_runs, arm_figures, log_arm_figures
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "kforge-x")
    client = tracker.client
    arms = {"single_shot": [(True, 2.0, ""), (True, 0.5, ""), (False, None, "")],
            "iterative": [(True, 4.0, ""), (True, 1.2, ""), (True, 100.0, "degenerate")]}
    for mode, problems in arms.items():
        parent = tracker.start_parent(mode, {}, "", {"loop_mode": mode})
        for i, (ok, speedup, flags) in enumerate(problems):
            rid = tracker.start_problem(parent, f"p{i}", {"loop_mode": mode, "problem": f"level1/p{i}", "level": "1",
                                                          "problem_flags": flags})
            client.log_metric(rid, "best_correct", float(ok))
            if speedup:
                client.log_metric(rid, "best_speedup_vs_eager", speedup)
            client.set_terminated(rid)
    runs = _problem_runs(client, tracker.experiment_id)
    figures = arm_figures(runs, "loop_mode")
    assert figures["single_shot"]["arm_problems"] == 3 and figures["single_shot"]["arm_fast_1"] == pytest.approx(1 / 3)
    assert figures["single_shot"]["arm_geomean_speedup_vs_eager"] == pytest.approx(1.0)  # sqrt(2.0 * 0.5)
    assert figures["iterative"]["arm_correctness_rate"] == 1.0  # the degenerate problem counts as correct...
    assert figures["iterative"]["arm_geomean_speedup_vs_eager"] == pytest.approx((4.0 * 1.2) ** 0.5)  # ...not here
    assert log_arm_figures(client, runs, "loop_mode") == 6
    logged = {r.data.tags["problem"] + r.data.tags["loop_mode"]: r.data.metrics for r in
              _problem_runs(client, tracker.experiment_id)}
    assert {m["arm_fast_1"] for k, m in logged.items() if k.endswith("single_shot")} == {0.3333}  # four digits
    assert {m["arm_geomean_speedup_vs_eager"] for k, m in logged.items() if k.endswith("iterative")} == {2.191}
    assert log_arm_figures(client, _problem_runs(client, tracker.experiment_id), "loop_mode") == 0  # nothing new
