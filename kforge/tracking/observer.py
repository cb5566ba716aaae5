"""MLflow tracking as a loop observer: a problem's run opens when its loop starts, gets a step per
iteration, and closes the moment the problem ends, so a job killed later loses none of it."""

from __future__ import annotations

import threading

from ..agents import Reference
from ..loop import LoopObserver, LoopState, ProblemResult, Step
from ..problems import Problem
from .schema import Tags
from .tracker import Tracker


def problem_tags(problem: Problem, reference: Reference | None) -> dict[str, str]:
    """A problem run's own tags (beside the job's labels)."""
    return {Tags.PROBLEM: problem.key, Tags.LEVEL: str(problem.level), Tags.SIZE: problem.size,
            Tags.REFERENCE_AVAILABLE: str(reference is not None).lower(),
            Tags.REFERENCE_SOURCE: reference.source if reference else "none"}


class MlflowObserver(LoopObserver):
    """Writes each problem of one job as a run nested under the job's parent run.

    ``continued``: problem key -> the run an earlier job was cut off in; that run is reopened and
    continued, not started anew (the loop gets the state it was left in from `resume`).
    """

    def __init__(self, tracker: Tracker, parent_id: str, labels: dict[str, str],
                 continued: dict[str, str] | None = None):
        self.tracker, self.parent_id, self.labels = tracker, parent_id, labels
        self.continued = continued or {}
        self.run_ids: dict[str, str] = {}
        """Problem key -> its run, for every problem started."""
        self._open: set[str] = set()
        self._lock = threading.Lock()

    def problem_started(self, problem: Problem, reference: Reference | None, resume: LoopState | None) -> None:
        rid = self.continued.get(problem.key)
        if rid is not None:
            self.tracker.reopen(rid)
        else:
            rid = self.tracker.start_problem(self.parent_id, problem.key,
                                             {**self.labels, **problem_tags(problem, reference)})
        with self._lock:
            self.run_ids[problem.key] = rid
            self._open.add(problem.key)

    def iteration_done(self, problem: Problem, step: Step) -> None:
        self.tracker.log_iteration(self.run_ids[problem.key], step.record, step.attempt, step.verdict,
                                   step.recommendation)

    def problem_ended(self, problem: Problem, result: ProblemResult) -> None:
        # A kforge error makes the run FAILED whatever the status (`Tracker.end_problem`).
        self.tracker.end_problem(self.run_ids[problem.key], result,
                                 status="KILLED" if result.stopped else "FINISHED")
        with self._lock:
            self._open.discard(problem.key)

    def problem_abandoned(self, problem: Problem) -> None:
        self.tracker.kill(self.run_ids[problem.key])
        with self._lock:
            self._open.discard(problem.key)

    def kill_open(self) -> None:
        """Mark KILLED the runs of problems that never ended (still in a model call after a second Ctrl-C)."""
        with self._lock:
            left, self._open = self._open, set()
        for key in left:
            self.tracker.kill(self.run_ids[key])
