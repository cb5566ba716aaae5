"""Scaling out on CPU: GPU splitting, joblib and Ray launchers, concurrent writers (resuming a killed sweep:
tests/test_interrupt.py)."""

import multiprocessing
import subprocess
import sys

import pytest

from kforge import REPO_DIR
from kforge.job.pipeline import split_gpus
from kforge.tracking import open_client
from tests.helpers import FAST

SYNTH = str(REPO_DIR / "pipelines" / "synthesize.py")
TINY = [o for o in FAST if not o.startswith("problems.names")]


def runs(uri: str, experiment: str = "kforge"):
    # Through kforge's client: a plain one racing the sweep to create a new store's tables can kill the sweep.
    client = open_client(uri)
    exp = client.get_experiment_by_name(experiment)
    return client, (client.search_runs([exp.experiment_id]) if exp else [])


def test_split_gpus_gives_concurrent_jobs_disjoint_gpus():
    gpus = [0, 1, 2, 3]
    assert [split_gpus(gpus, k, 2) for k in range(4)] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [split_gpus(gpus, k, 4) for k in range(4)] == [[0], [1], [2], [3]]
    assert split_gpus(gpus, 5, 1) == gpus and split_gpus([], 1, 2) == []
    assert split_gpus([0, 1], 3, 4) == [1]  # more jobs than GPUs: they must share


@pytest.mark.parametrize("launcher", [
    ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    ["hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2", "+hydra.launcher.ray.init.include_dashboard=false"],
    # SLURM's launcher with its local executor: the same submitit path, no scheduler needed
    ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=15"],
], ids=["joblib", "ray", "submitit"])
def test_launcher_runs_two_jobs_into_one_store(tmp_path, launcher):
    plugin = {"joblib": "hydra_plugins.hydra_joblib_launcher", "ray": "hydra_plugins.hydra_ray_launcher",
              "submitit_local": "hydra_plugins.hydra_submitit_launcher"}[launcher[0].split("=")[1]]
    pytest.importorskip(plugin)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cmd = [sys.executable, SYNTH, "-m", *launcher, "loop=single_shot,iterative", "model=oracle", "loop.iterations=2",
           f"tracking.uri={uri}", "problems.names=[level1/1_ReLU]", *TINY]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    _, all_runs = runs(uri)
    parents = [r for r in all_runs if r.data.tags.get("kforge.kind") == "sweep-job"]
    problems = [r for r in all_runs if r.data.tags.get("kforge.kind") == "problem"]
    assert sorted(p.data.tags["loop_mode"] for p in parents) == ["iterative", "single_shot"]
    assert len(problems) == 2 and all(p.info.status == "FINISHED" for p in problems)


def _writer(uri: str, n: int, who: int) -> None:
    from kforge.tracking import Tracker
    t = Tracker(uri, "concurrent")
    for i in range(n):
        rid = t.start_problem(t.start_parent(f"w{who}-{i}", {"who": who}, "who: 1", {}), f"p{who}-{i}", {})
        t.client.log_metric(rid, "x", float(i))
        t.client.log_text(rid, f"{who}-{i}", "note.txt")
        t.client.set_terminated(rid)


def test_concurrent_writers_lose_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    _writer(uri, 1, 99)  # create the database and experiment first
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(uri, 15, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    client, all_runs = runs(uri, "concurrent")
    names = {r.info.run_name for r in all_runs if r.data.tags.get("kforge.kind") == "problem"}
    assert names == {f"p{w}-{i}" for w in range(4) for i in range(15)} | {"p99-0"}
    assert all(r.data.metrics.get("x") is not None for r in all_runs if r.data.tags.get("kforge.kind") == "problem")


def _first_touch(uri: str, who: int) -> None:
    if who % 2:
        open_client(uri).search_experiments()  # a reader, such as `make tables`, beside starting jobs
    else:
        _writer(uri, 1, who)


def test_a_new_store_touched_by_several_processes_at_once(tmp_path):
    # Each process creating the tables of a brand-new SQLite store at once used to kill all but one.
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_first_touch, args=(uri, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    _, all_runs = runs(uri, "concurrent")
    assert {r.info.run_name for r in all_runs if r.data.tags.get("kforge.kind") == "problem"} == {"p0-0", "p2-0"}
