"""MLflow tracking owns a job's runs (kforge/tracking/observer.py), through the pipeline on CPU: the arm as
parameters and in run names, a rerun of a finished job that adds nothing, and a broken problem skipped
while the sweep goes on; and, told to the observer alone, a whole-model job's outcome on its parent run."""

from pathlib import Path

from mlflow.tracking import MlflowClient

from kforge.job.pipeline import run
from tests.helpers import config, fenced, scripted


def runs(tmp_path: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    found = client.search_runs([client.get_experiment_by_name("kforge").experiment_id])
    kind = lambda k: [r for r in found if r.data.tags.get("kforge.kind") == k]  # noqa: E731
    return client, kind("sweep-job"), kind("problem")


def test_a_job_and_its_problems_carry_their_arm_as_parameters_and_in_their_names(tmp_path, pool):
    run(config(tmp_path, "loop=single_shot"), llm=scripted(fenced("relu_ok.py")), pool=pool)
    _, (job,), (problem,) = runs(tmp_path)
    arm = {"model": "scripted", "backend": "cpu", "loop_mode": "single_shot", "reference": "none",
           "profiler": "none", "analysis": "off", "rules": "kforge", "level": "1"}
    assert {k: job.data.params.get(k) for k in arm} == arm
    assert {k: problem.data.params.get(k) for k in arm} == arm and problem.data.params["problem"] == "level1/1_ReLU"
    assert job.data.params["loop.mode"] == "single_shot"  # the whole configuration, flattened, beside them
    assert job.info.run_name == "scripted · cpu · single_shot · L1"
    assert problem.info.run_name == "L1/1_ReLU · single_shot"
    # Shown as logged in MLflow's tables: a speedup to four significant digits, not sixteen.
    speedup = problem.data.metrics["best_speedup_vs_eager"]
    assert speedup > 0 and float(f"{speedup:.4g}") == speedup


def test_metrics_keep_four_significant_digits_and_whole_numbers_exactly():
    from kforge.tracking.tracker import as_metrics
    got = {m.key: m.value for m in as_metrics({"speedup": 1.287984547851849, "ms": 0.000123456789, "tokens": 123457,
                                               "none": None, "nan": float("nan"), "text": "n/a", "flat": "2.5"})}
    assert got == {"speedup": 1.288, "ms": 0.0001235, "tokens": 123457, "flat": 2.5}


def test_a_rerun_of_a_finished_job_adds_no_run_and_says_so(tmp_path, pool, capsys):
    first = run(config(tmp_path, "loop=single_shot"), llm=scripted(fenced("relu_ok.py")), pool=pool)
    capsys.readouterr()
    model = scripted(fenced("relu_ok.py"))
    again = run(config(tmp_path, "loop=single_shot"), llm=model, pool=pool)
    out = capsys.readouterr().out
    assert "this job is complete" in out and "no run added" in out and model.calls == 0
    _, jobs, problems = runs(tmp_path)
    assert len(jobs) == 1 and len(problems) == 1 and jobs[0].info.status == "FINISHED"
    assert again.parent_run_id == first.parent_run_id and again.stats["fast_0"] == first.stats["fast_0"] == 1.0
    assert [r.problem.key for r in again.results] == ["level1/1_ReLU"]  # the finished problem still counts


def test_a_rerun_of_a_job_interrupted_after_its_problems_ended_closes_its_parent(tmp_path, pool, capsys):
    """A job interrupted after every problem had ended (in its summary, say) left its parent KILLED for good: the
    rerun said "this job is complete ... no run added" and closed nothing. It still adds no run, and closes the
    earlier parent FINISHED with the job's figures, as docs/tracking.md (Resume) promises."""
    first = run(config(tmp_path, "loop=single_shot"), llm=scripted(fenced("relu_ok.py")), pool=pool)
    client, (job,), _ = runs(tmp_path)
    verifications = job.data.metrics["verifications"]
    client.log_metric(job.info.run_id, "fast_0", 0.0)  # what an interrupted job's figures may have said
    client.set_terminated(job.info.run_id, status="KILLED")
    capsys.readouterr()
    again = run(config(tmp_path, "loop=single_shot"), llm=scripted(fenced("relu_ok.py")), pool=pool)
    out = capsys.readouterr().out
    assert "this job is complete" in out and "no run added" in out and "closed FINISHED" in out
    _, (job,), problems = runs(tmp_path)
    assert job.info.status == "FINISHED" and len(problems) == 1 and again.parent_run_id == first.parent_run_id
    assert job.data.metrics["fast_0"] == 1.0 and job.data.metrics["problems"] == 1
    assert job.data.metrics["verifications"] == verifications  # the earlier job's count, not this one's 0
    run(config(tmp_path, "loop=single_shot"), llm=scripted(fenced("relu_ok.py")), pool=pool)
    assert "closed FINISHED" not in capsys.readouterr().out  # a parent closed already is left alone


def test_a_broken_problem_is_skipped_with_its_traceback_and_the_sweep_goes_on(tmp_path, pool, capsys):
    """A KernelBench folder with a problem whose inputs cannot be made: the verifier says the problem itself
    fails; that problem's run ends with its traceback and state problem_error, the next problem runs."""
    root = tmp_path / "kb" / "level1"
    root.mkdir(parents=True)
    relu = (Path(__file__).parents[2] / "kforge" / "problems" / "builtin" / "level1" / "1_ReLU.py").read_text()
    (root / "1_ReLU.py").write_text(relu)
    (root / "2_Broken.py").write_text(relu.replace("def get_inputs():\n",
                                                   "def get_inputs():\n    raise RuntimeError('no inputs today')\n"))
    cfg = config(tmp_path, "loop=single_shot", "problems=kernelbench", f"problems.root={tmp_path / 'kb'}",
                 "problems.names=null", "loop.concurrency=1")
    result = run(cfg, llm=scripted(fenced("relu_ok.py"), fenced("relu_ok.py")), pool=pool)
    out = capsys.readouterr().out
    assert [r.problem.key for r in result.results] == ["level1/1_ReLU"] and result.results[0].correct
    assert "level1/2_Broken was skipped: the problem itself fails" in out
    client, (job,), problems = runs(tmp_path)
    broken = next(r for r in problems if r.data.tags["problem"] == "level1/2_Broken")
    assert broken.data.tags["state"] == "problem_error" and broken.info.status == "FAILED"
    text = Path(client.download_artifacts(broken.info.run_id, "problem_error.txt", str(tmp_path))).read_text()
    assert "no inputs today" in text
    assert job.data.metrics["problem_errors"] == 1 and job.data.metrics["problems"] == 1


def _record(folder: Path, state: str = "unchanged"):
    """A whole-model job's outcome with nothing assembled, its folder holding one file."""
    from kforge.workload.record import Unsolved, WorkloadRecord
    (folder / "workload.json").write_text("{}")
    unsolved = [Unsolved("1_attn_Attention", "attn", 0.6, "not finished"), Unsolved("2_norm_Norm", "norm", 0.3, "x")]
    return WorkloadRecord("block.py", folder, state, "no region was solved", coverage=0.9, regions=2, model_ms=1.5,
                          unsolved=unsolved)


def test_a_workload_outcome_goes_on_the_open_parent_run_before_it_ends(tmp_path):
    from kforge.loop import JobEnd, JobStart
    from kforge.problems import load_builtin
    from kforge.tracking import Tracker
    from kforge.tracking.observer import JobRun, MlflowObserver
    from kforge.tracking.schema import WorkloadFiles, WorkloadMetrics, WorkloadTags
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db")
    observer = MlflowObserver(tracker, JobRun("a job", {}, "", {}))
    observer.job_started(JobStart(load_builtin(names=["level1/1_ReLU"])))
    (tmp_path / "w").mkdir()
    observer.workload_done(_record(tmp_path / "w"))
    assert tracker.client.get_run(observer.parent_id).info.status == "RUNNING"
    observer.job_ended(JobEnd([], {}))
    run = tracker.client.get_run(observer.parent_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[WorkloadTags.STATE] == "unchanged"
    assert run.data.tags[WorkloadTags.UNSOLVED] == "1_attn_Attention,2_norm_Norm"
    assert run.data.metrics[WorkloadMetrics.COVERAGE] == 0.9 and run.data.metrics[WorkloadMetrics.SOLVED] == 0
    assert WorkloadMetrics.CORRECT not in run.data.metrics  # nothing was assembled: no verdict, no speedup
    assert [f.path for f in tracker.client.list_artifacts(observer.parent_id, WorkloadFiles.FOLDER)] == \
        [WorkloadFiles.WORKLOAD_JSON]


def test_a_rerun_with_nothing_to_run_records_its_workload_on_the_earlier_parent_run(tmp_path):
    from kforge.loop import JobStart
    from kforge.tracking import Tracker
    from kforge.tracking.observer import JobRun, MlflowObserver
    from kforge.tracking.schema import WorkloadTags
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db")
    earlier = tracker.start_parent("a job", {}, "", {})
    observer = MlflowObserver(tracker, JobRun("a job", {}, "", {}, previous=earlier))
    observer.job_started(JobStart([]))  # every region finished earlier: no run opens
    (tmp_path / "w").mkdir()
    observer.workload_done(_record(tmp_path / "w", state="correct"))
    assert observer.parent_id is None
    assert tracker.client.get_run(earlier).data.tags[WorkloadTags.STATE] == "correct"


def test_a_job_run_at_another_precision_says_so_in_its_name():
    from types import SimpleNamespace as NS

    from kforge.job.pipeline import job_run_name
    job = NS(problems=[NS(level=1), NS(level=2)], llm=NS(config=NS(name="oracle")), backend=NS(name="cpu"),
             config=NS(loop=NS(mode="iterative"), verify=NS(precision="bf16")))
    assert job_run_name(job) == "oracle · cpu · bf16 · iterative · L1+L2"
    job.config.verify.precision = "fp32"
    assert job_run_name(job) == "oracle · cpu · iterative · L1+L2"
