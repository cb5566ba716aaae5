"""Ctrl-C, SIGTERM and SIGKILL in the middle of a sweep, then the same command again.

A real `pipelines/synthesize.py` process on the cpu backend with the oracle model (hand-written
kernels, not an LLM; each call waits a second, like a model, so the signal lands mid-problem).
After the rerun every problem has exactly one run, FINISHED, and no run is FAILED or RUNNING.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from kforge import REPO_DIR
from tests.test_scaleout import TINY, runs

SYNTH = str(REPO_DIR / "pipelines" / "synthesize.py")
PROBLEMS = ["level1/1_ReLU", "level1/2_Softmax", "level1/3_LayerNorm"]


def sweep(uri: str) -> list[str]:
    return [sys.executable, SYNTH, "model=oracle", "model.latency_s=1.0", "loop.iterations=2", f"tracking.uri={uri}",
            f"problems.names=[{','.join(PROBLEMS)}]", *TINY]  # tiny inputs: the model's latency sets the pace


def problem_runs(uri: str):
    client, all_runs = runs(uri)
    return client, [r for r in all_runs if r.data.tags.get("kforge.kind") == "problem"], \
        [r for r in all_runs if r.data.tags.get("kforge.kind") == "sweep-job"]


def wait_until_mid_problem(proc, uri: str, db) -> None:
    """Until one problem has finished and the next has started but not finished."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.3)
        if not db.exists():
            continue
        try:
            _, problems, _ = problem_runs(uri)
        except Exception:  # noqa: BLE001 - the store is still being created
            continue
        finished = [r for r in problems if r.info.status == "FINISHED"]
        # Mid-way through a problem that is not the last, so the signal always lands before the sweep ends.
        if finished and len(finished) < len(problems) < len(PROBLEMS):
            return
    pytest.fail(f"the sweep ended (rc {proc.poll()}) or stalled before it could be interrupted")


# Two real sweep processes each: 27-34 s on a 2-core machine, 70-80 s while other jobs load it.
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_interrupted_sweep_then_the_same_command_finishes_every_problem_once(tmp_path, sig):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cmd = sweep(uri)
    out = open(tmp_path / "first.log", "w")
    # As a terminal would: SIGINT delivered, even when this test itself runs in a background job (a shell
    # starts those with SIGINT ignored, and a child inherits that; Python then never raises KeyboardInterrupt).
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_until_mid_problem(proc, uri, tmp_path / "mlflow.db")
    if sig == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
    elif sig == "SIGTERM":
        os.kill(proc.pid, signal.SIGTERM)  # a scheduler, `kill`
    else:
        os.killpg(proc.pid, signal.SIGKILL)
    rc = proc.wait(timeout=300)
    out.close()
    first_log = (tmp_path / "first.log").read_text()
    client, before, parents = problem_runs(uri)
    states = {r.data.tags["problem"]: r.info.status for r in before}
    done_iters = {r.data.tags["problem"]: len(client.get_metric_history(r.info.run_id, "state_index")) for r in before}
    assert "FAILED" not in states.values(), first_log[-3000:]
    if sig == "SIGKILL":
        assert rc == -signal.SIGKILL and "RUNNING" in states.values()
    else:
        # Problems in flight ended KILLED (the pool closed only after them); the parent too, and its
        # metrics and the printed count cover every finished problem.
        assert rc == 130, first_log[-3000:]
        assert "KILLED" in states.values() and "RUNNING" not in states.values(), (states, first_log[-3000:])
        finished = sum(s == "FINISHED" for s in states.values())
        assert [p.info.status for p in parents] == ["KILLED"]
        assert parents[0].data.metrics["problems"] == finished
        assert f"interrupted; {finished} finished problem(s) are in MLflow" in first_log
    cut_off = {k: r.info.run_id for k, r in ((r.data.tags["problem"], r) for r in before) if states[k] != "FINISHED"}

    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "resuming" in res.stdout
    client, after, parents = problem_runs(uri)
    keys = sorted(r.data.tags["problem"] for r in after)
    assert keys == sorted(PROBLEMS)  # every problem exactly once
    assert all(r.info.status == "FINISHED" for r in after), [(r.data.tags["problem"], r.info.status) for r in after]
    # The rerun continued the first job's parent run: no run added.
    assert [p.info.status for p in parents] == ["FINISHED"]
    for r in after:  # each cut-off problem continued in its own run, from its last recorded iteration
        key = r.data.tags["problem"]
        if key in cut_off:
            assert r.info.run_id == cut_off[key]
        steps = sorted(m.step for m in client.get_metric_history(r.info.run_id, "state_index"))
        assert steps == [0, 1], (key, steps)
    # The rerun verified only what the first job had not recorded; the oracle answers one kernel per problem,
    # which a loop verifies once (kforge.loop.finalists): one verification per problem with iterations left.
    (newest,) = parents
    expected = sum(done_iters.get(k, 0) < 2 for k in PROBLEMS if states.get(k) != "FINISHED")
    assert newest.data.metrics["verifications"] == expected
    assert newest.data.metrics["problems_skipped"] == sum(s == "FINISHED" for s in states.values())
    assert newest.data.metrics["problems"] == len(PROBLEMS)
