"""What the MLflow UI shows first: experiment tags, the saved view, a job's summary; old metric names;
no download bars. The browser check itself is tests/test_mlflow_browser.py."""

import json

import pytest
from mlflow.tracking import MlflowClient

from kforge.loop import IterationRecord, ProblemResult, job_stats
from kforge.problems import load_builtin
from kforge.tracking import Tracker, metric, metric_history, open_client
from kforge.tracking import view as mlflow_view
from kforge.verify import Verdict
from kforge.verify.verdict import TimingStats


def result(problem, states, speedup=None):
    r = ProblemResult(problem)
    r.records = [IterationRecord(i, "fix", s, s == "correct", "") for i, s in enumerate(states)]
    if speedup is not None:
        r.best_verdict = Verdict.from_dict({"state": "correct", "message": ""})
        r.best_verdict.runtime, r.best_verdict.ref = TimingStats(1.0, 1.0, 0, 1, 1.0), TimingStats(speedup, speedup,
                                                                                                     0, 1, speedup)
    return r


def test_new_experiment_opens_on_the_runs_table_in_kforges_view(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "kforge-x")
    tags = tracker.client.get_experiment(tracker.experiment_id).tags
    assert tags[mlflow_view.KIND_TAG] == "custom_model_development"
    view = json.loads(tags[mlflow_view.VIEW_TAG])
    state = json.loads(view["state"])
    assert view["name"] and isinstance(view["createdAt"], int)
    assert "metrics.`best_speedup_vs_eager`" in state["selectedColumns"] and "tags.`state`" in state["selectedColumns"]
    # The arm first, as parameters; a group's row the max (a mean of speedups is no figure the tables print).
    assert state["selectedColumns"][:3] == ["params.`model`", "params.`backend`", "params.`loop_mode`"]
    assert state["groupBy"] == {"aggregateFunction": "max", "groupByKeys": [{"mode": "tag", "groupByData": "kforge.kind"}]}
    url = tracker.view_url()
    assert url == (f"http://127.0.0.1:5000/#/experiments/{tracker.experiment_id}/runs?"
                   "workflowType=machine_learning&viewStateShareKey=kforge")
    assert mlflow_view.runs_url("http://mlflow.example:5000/", "7").startswith(
        "http://mlflow.example:5000/#/experiments/7/runs?")


def test_an_older_experiment_gets_the_tags_and_a_chosen_kind_stays(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    old = client.create_experiment("old", artifact_location=(tmp_path / "a").as_uri())
    mine = client.create_experiment("mine", artifact_location=(tmp_path / "b").as_uri(),
                                    tags={mlflow_view.KIND_TAG: "genai_development"})
    Tracker(uri, "old"), Tracker(uri, "mine")
    assert client.get_experiment(old).tags[mlflow_view.KIND_TAG] == "custom_model_development"
    assert client.get_experiment(mine).tags[mlflow_view.KIND_TAG] == "genai_development"
    assert mlflow_view.VIEW_TAG in client.get_experiment(mine).tags
    assert mlflow_view.experiment_tags(client.get_experiment(old).tags) == {}  # nothing left to write


def test_job_summary_is_a_markdown_table_of_problems():
    relu, softmax, gelu = load_builtin(names=["level1/1_ReLU", "level1/2_Softmax", "level1/3_LayerNorm"])
    results = [result(relu, ["compilation_failure", "correct"], speedup=1.5),
               result(softmax, ["runtime_error", "numerical_mismatch"]),
               result(gelu, ["correct", "timeout"], speedup=0.5)]
    stats = job_stats(results, "eager")  # what the job logs: fast_1 is counted there, once
    text = mlflow_view.job_summary({"model_label": "oracle (oracle, not an LLM)", "backend": "cpu",
                                    "loop_mode": "iterative"}, results, stats, "eager", "KILLED")
    assert text.startswith("**oracle (oracle, not an LLM)** · backend `cpu` · `iterative`")
    assert "3 problem(s): **2 correct**, 1 correct and faster (fast_1), geomean speedup **0.87x**" in text
    assert "against PyTorch eager" in text and "The job was **KILLED**" in text
    assert "| problem | state | best speedup vs eager | iterations |" in text
    assert "| level1/1_ReLU | correct | 1.50x | 2 |" in text
    assert "| level1/2_Softmax | numerical_mismatch | - | 2 |" in text
    assert "| level1/3_LayerNorm | correct | 0.50x | 2 |" in text  # correct once: its outcome stays correct


def test_old_metric_names_still_read(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    rid = client.create_run(client.create_experiment("e", artifact_location=(tmp_path / "a").as_uri())).info.run_id
    for step, v in enumerate((1.0, 7.0)):
        client.log_metric(rid, "state", v, step=step)  # as kforge logged it before the rename
    client.log_metric(rid, "best_speedup_eager", 2.5)
    assert [m.value for m in metric_history(client, rid, "state_index")] == [1.0, 7.0]
    metrics = client.get_run(rid).data.metrics
    assert metric(metrics, "best_speedup_vs_eager") == 2.5 and metric(metrics, "best_speedup_vs_compile") is None


def test_downloads_draw_no_progress_bar(tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    plain = MlflowClient(tracking_uri=uri)
    rid = plain.create_run(plain.create_experiment("e", artifact_location=(tmp_path / "a").as_uri())).info.run_id
    for i in range(3):
        plain.log_text(rid, "x", f"iter_00{i}/record.json")
    plain.download_artifacts(rid, "iter_000", str(tmp_path / "d0"))
    assert "Downloading artifacts" in capfd.readouterr().err  # MLflow's default: a bar per download
    client = open_client(uri)
    client.download_artifacts(rid, "iter_001", str(tmp_path / "d1"))
    assert "Downloading artifacts" not in capfd.readouterr().err


@pytest.fixture(autouse=True)
def _restore_progress_bar_setting(monkeypatch):
    # open_client sets MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR for the process; keep tests independent.
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
