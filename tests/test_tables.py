"""Ablation tables from a synthetic MLflow store, against numbers worked out by hand."""

import math

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from kforge.tables import ablation_table, build_all, by_iteration, dedupe, fast_p_curve, load_runs


def make_run(client, exp_id, parent, problem, level, mode, correct, speedup, status="FINISHED", history=None):
    run = client.create_run(exp_id, run_name=problem, tags={
        "kforge.kind": "problem", "mlflow.parentRunId": parent, "problem": problem, "level": str(level),
        "model": "m", "backend": "cpu", "loop_mode": mode, "reference": "none", "profiler": "none",
        "analysis": "off", "size": "cpu", "problems_source": "builtin"})
    rid = run.info.run_id
    metrics = [Metric("best_correct", float(correct), 0, 0), Metric("iterations", float(len(history or [1])), 0, 0)]
    if speedup is not None:
        metrics.append(Metric("best_speedup_eager", speedup, 0, 0))
    for step, (ok, s) in enumerate(history or []):
        metrics.append(Metric("correct", float(ok), 0, step))
        if s is not None:
            metrics.append(Metric("speedup_eager", s, 0, step))
    client.log_batch(rid, metrics=metrics)
    client.set_terminated(rid, status=status)
    return rid


@pytest.fixture
def store(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("kforge-single_vs_iterative", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    # single_shot, level 1: correct at 2.0x and 0.5x, one wrong  -> 2/3 correct, fast_1 1/3, geomean 1.0
    make_run(client, exp, parent, "level1/a", 1, "single_shot", True, 2.0)
    make_run(client, exp, parent, "level1/b", 1, "single_shot", True, 0.5)
    make_run(client, exp, parent, "level1/c", 1, "single_shot", False, None)
    # An older run of the same configuration and problem (a repeated sweep): only the newest counts.
    make_run(client, exp, parent, "level1/c", 1, "iterative", False, None, history=[(0, None)] * 3)
    # iterative, level 1: 4.0x, 1.2x, 1.6x -> 3/3, fast_1 3/3, fast_1.5 2/3, geomean (4*1.2*1.6)^(1/3)
    make_run(client, exp, parent, "level1/a", 1, "iterative", True, 4.0, history=[(0, None), (1, 2.0), (1, 4.0)])
    make_run(client, exp, parent, "level1/b", 1, "iterative", True, 1.2, history=[(1, 1.2), (1, 1.1), (0, None)])
    make_run(client, exp, parent, "level1/c", 1, "iterative", True, 1.6, history=[(0, None), (0, None), (1, 1.6)])
    make_run(client, exp, parent, "level1/d", 1, "iterative", True, 9.0, status="KILLED")  # killed: never counts
    return client


def test_dedupe_keeps_newest_finished(store):
    runs = load_runs(store, "kforge-single_vs_iterative")
    assert len(runs) == 8
    kept = dedupe(runs)
    assert len(kept) == 6 and "level1/d" not in set(kept["problem"])


def test_table_numbers(store):
    t = ablation_table(dedupe(load_runs(store, "kforge-single_vs_iterative")), "loop_mode")
    row = t[(t.level == "1") & (t.loop_mode == "single_shot")].iloc[0]
    assert (row.correct, row.fast_1, row["fast_1.5"], row.n) == ("2/3", "1/3", "1/3", 3)
    assert row.geomean_speedup == pytest.approx(1.0)
    row = t[(t.level == "1") & (t.loop_mode == "iterative")].iloc[0]
    assert (row.correct, row.fast_1, row["fast_1.5"]) == ("3/3", "3/3", "2/3")
    assert row.geomean_speedup == pytest.approx((4.0 * 1.2 * 1.6) ** (1 / 3))
    assert set(t.level) == {"1", "all"}


def test_fast_p_curve(store):
    curve = fast_p_curve(dedupe(load_runs(store, "kforge-single_vs_iterative")), "loop_mode", ps=[0, 1.0, 1.5, 3.0])
    it = curve[curve.loop_mode == "iterative"].set_index("p")["fast_p"]
    assert list(it) == pytest.approx([1.0, 1.0, 2 / 3, 1 / 3])


def test_by_iteration(store):
    hist = by_iteration(store, dedupe(load_runs(store, "kforge-single_vs_iterative")), "loop_mode")
    it = hist[hist.loop_mode == "iterative"].set_index("iteration")
    # after it 0: only b correct (1.2); after it 1: a (2.0), b (1.2); after it 2: a 4.0, b 1.2, c 1.6
    assert list(it["correct_rate"]) == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert it.loc[1, "geomean_speedup"] == pytest.approx(math.sqrt(2.0 * 1.2))
    assert it.loc[2, "geomean_speedup"] == pytest.approx((4.0 * 1.2 * 1.6) ** (1 / 3))


def test_files_written(store, tmp_path):
    res = build_all(store, tmp_path / "results", ["single_vs_iterative", "reference_transfer"])
    files = res["single_vs_iterative"]["files"]
    assert "| m | cpu | 1 | iterative | 3/3 | 3/3 | 2/3 | 1.97 |" in files["md"].read_text()
    assert files["csv"].read_text().startswith("model,backend,level,loop_mode")
    assert "\\begin{tabular}" in files["tex"].read_text()
    assert files["fast_p"].read_bytes()[:4] == b"\x89PNG" and files["iterations"].stat().st_size > 1000
    assert res["reference_transfer"]["runs"] == 0
