"""kforge/tracking/schema.py: the layout's names, and every reader reading back what the writer logged."""

from dataclasses import dataclass

import pytest

from kforge.job.pipeline import run
from kforge.job.reference import load_references
from kforge.loop import IterationRecord
from kforge.problems import load_builtin
from kforge.report.runs import dedupe, load_runs
from kforge.tracking import Tracker
from kforge.tracking.resume import previous_runs
from kforge.tracking.schema import (
    ITERATION_METRICS,
    RENAMED,
    STATE_CODES,
    STATE_INDEX,
    Files,
    Metrics,
    Tags,
    iteration_values,
    metrics_of,
)
from tests.helpers import config, fenced, scripted


def test_the_per_iteration_metrics_are_the_records_number_fields():
    # The names runs have always been logged under: changing one breaks every store written before.
    assert list(ITERATION_METRICS) == ["correct", "correct_kernelbench", "speedup_vs_eager", "speedup_vs_compile",
                                       "runtime_ms", "speed_of_light", "kernel_share", "prompt_tokens",
                                       "completion_tokens", "cost_usd", "llm_s", "verify_s", "analysis_s",
                                       "replayed_calls", "parent", "depth"]

    @dataclass
    class WithSpills(IterationRecord):
        spill_bytes: float | None = None
    assert metrics_of(WithSpills) == {**ITERATION_METRICS, "spill_bytes": "spill_bytes"}  # one field, one metric
    values = iteration_values(IterationRecord(3, "fix", "correct", True, "", speedup_eager=2.0))
    assert values[STATE_INDEX] == STATE_CODES["correct"] and values["speedup_vs_eager"] == 2.0 and "speedup_vs_compile" not in values
    assert values["correct"] == 1.0 and "iteration" not in values and "wall_s" not in values


def test_names_and_paths_as_logged():
    assert (Files.at(7, Files.RECORD), Files.BEST_KERNEL, Files.ERROR) == \
        ("iter_007/record.json", "best/kernel.py", "error.txt")
    assert (Tags.kernel_at(2), Tags.KIND, Tags.CONFIG_HASH) == ("kernel.2", "kforge.kind", "kforge.config_hash")
    assert (Metrics.best_speedup("compile"), Metrics.geomean_speedup("eager")) == \
        ("best_speedup_vs_compile", "geomean_speedup_vs_eager")
    assert RENAMED["best_speedup_vs_eager"] == "best_speedup_eager" and RENAMED[STATE_INDEX] == "state"


def test_a_whole_model_jobs_files_are_its_extraction_folder_under_workload():
    """The writer uploads the extraction folder as it is (`Tracker.log_workload`): each file's MLflow path is
    the folder's name under ``workload/``, as the workload layer names it."""
    from kforge.tracking.schema import WorkloadFiles
    from kforge.workload.extract import WORKLOAD_JSON
    from kforge.workload.prepare import ASSEMBLED, PROFILE_FILES, RESULT_JSON
    from kforge.workload.record import SUMMARY_TXT
    under = lambda name: f"{WorkloadFiles.FOLDER}/{name}"  # noqa: E731
    assert (WorkloadFiles.WORKLOAD_JSON, WorkloadFiles.ASSEMBLED, WorkloadFiles.RESULT, WorkloadFiles.SUMMARY) == \
        (under(WORKLOAD_JSON), under(ASSEMBLED), under(RESULT_JSON), under(SUMMARY_TXT))
    assert {WorkloadFiles.PROFILE_TABLE, WorkloadFiles.PROFILE_PLOT} <= {under(f) for f in PROFILE_FILES}


def test_every_reader_reads_back_what_a_job_wrote(tmp_path, pool):
    """One real job on CPU (a mismatch, then a correct kernel), read back by resume, the tables and
    reference transfer."""
    cfg = config(tmp_path, "loop.iterations=2", "tracking.experiment=kforge-single_vs_iterative")
    job = run(cfg, llm=scripted(fenced("relu_wrong_math.py"), fenced("relu_ok.py")), pool=pool)
    written = job.results[0]
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "kforge-single_vs_iterative")

    previous = previous_runs(tracker.client, tracker.experiment_id, _hash_of_logged_run(tracker),
                             load_builtin(names=["level1/1_ReLU"]))
    state = previous["level1/1_ReLU"].state
    assert previous["level1/1_ReLU"].finished and state.next_iteration == 2
    assert [r.to_dict() for r in state.result.records] == [r.to_dict() for r in written.records]
    assert state.result.best_code == written.best_code and state.result.best_iteration == 1
    assert state.last_verdict.state.value == "correct"
    # Every iteration's kernel and verdict, not only the best and the last (a beam search resumes from them).
    assert sorted(state.kernels) == [0, 1] and state.kernels[1][0] == written.best_code
    assert state.kernels[0][1].state.value == "numerical_mismatch" and state.kernels[0][2].iteration == 0

    runs = load_runs(tracker.client, "kforge-single_vs_iterative")
    row = dedupe(runs).iloc[0]
    assert row["problem"] == "level1/1_ReLU" and row["correct"] and row["speedup_eager"] == pytest.approx(written.speedup_eager, rel=1e-3)
    assert row["best_kernel"] == written.best_verdict.source_hash and row["iterations"] == 2
    assert [(s, ok) for s, ok, _, _ in row["steps"]] == [(0, False), (1, True)]
    assert row["steps"][1][2] == pytest.approx(written.records[1].speedup_eager, rel=1e-3) and row["steps"][1][3] == row["best_kernel"]

    refs = load_references({"kind": "mlflow", "backend": "cpu", "experiment": "kforge-single_vs_iterative"},
                           load_builtin(names=["level1/1_ReLU"]), "triton", tracker.uri)
    assert refs["level1/1_ReLU"].code == written.best_code


def _hash_of_logged_run(tracker) -> str:
    """The configuration hash the job tagged its runs with (what a rerun of it computes)."""
    parent = tracker.client.search_runs([tracker.experiment_id], f"tags.`{Tags.KIND}` = 'sweep-job'")[0]
    return parent.data.tags[Tags.CONFIG_HASH]
