"""Reading what earlier jobs of a configuration left (kforge/tracking/resume.py): a whole-model job's folder."""

import time

from kforge.tracking import Tracker
from kforge.tracking.resume import workload_folders
from kforge.tracking.schema import Tags, WorkloadTags


def test_workload_folders_of_a_configuration_newest_first(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert workload_folders(uri, "kforge", "abc") == []
    assert not (tmp_path / "mlflow.db").exists()  # read before the job's tracker: nothing is created
    tracker = Tracker(uri)
    tracker.start_parent("old", {}, "", {Tags.CONFIG_HASH: "abc", WorkloadTags.DIR: "/w/old"})
    tracker.start_parent("plain", {}, "", {Tags.CONFIG_HASH: "abc"})  # not a whole-model job
    tracker.start_parent("other", {}, "", {Tags.CONFIG_HASH: "xyz", WorkloadTags.DIR: "/w/other"})
    time.sleep(0.01)  # a later start time
    tracker.start_parent("new", {}, "", {Tags.CONFIG_HASH: "abc", WorkloadTags.DIR: "/w/new"})
    assert workload_folders(uri, "kforge", "abc") == ["/w/new", "/w/old"]
    assert workload_folders(uri, "another experiment", "abc") == []


def test_a_resumed_problem_weighs_every_correct_kernel_from_before_the_interruption(tmp_path):
    """Restored, a problem knew only its best kernel, by one timing: the kernels before the interruption were no
    finalists any more, so the re-timing at the problem's end could choose a kernel made after it alone."""
    from types import SimpleNamespace

    from kforge.loop import IterationRecord
    from kforge.problems import load_builtin
    from kforge.tracking.resume import restore
    from tests.loop.test_finalists import kernel, timed

    (relu,) = load_builtin(names=["level1/1_ReLU"], size="cpu")
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db")
    run_id = tracker.start_problem(tracker.start_parent("job", {}, "", {}), relu.key, {Tags.PROBLEM: relu.key})
    for it, (name, speedup, best) in enumerate([("a", 1.1, True), ("b", 1.6, True), ("a", 1.3, False)]):
        attempt = SimpleNamespace(prompt_text="p", response=None, candidate=SimpleNamespace(source=kernel(name)))
        record = IterationRecord(iteration=it, phase="fix", state="correct", correct=True, message="ok",
                                 speedup_eager=speedup, is_best=best)
        tracker.log_iteration(run_id, record, attempt, timed(name, speedup))
    result = restore(tracker.client, tracker.client.get_run(run_id), relu).result
    assert result.best_iteration == 1 and result.speedup_eager == 1.6
    assert sorted(result.finalists(3, "eager")) == ["a", "b"]  # both are re-timed at the problem's end
    assert [v.speedup_eager for v in result.timings["a"]] == [1.1, 1.3]  # a kernel met twice pools its timings
    assert not result.offer(kernel("c"), timed("c", 1.4), 3, "eager") and result.best_iteration == 1
