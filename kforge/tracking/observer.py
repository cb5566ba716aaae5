"""MLflow tracking as a loop observer: it owns a job's runs. The job's parent run opens when the job
starts (or, for a rerun of its configuration, the earlier job's parent is continued), a problem's run
opens when its loop starts, gets a step per iteration and closes the moment the problem ends, so a job
killed later loses none of it; the parent closes with the job's figures, and a whole-model job's outcome
(``workload_done``, told before the job's end) is on it by then. A job with nothing to run (every problem
finished earlier) opens no run; it closes the earlier parent if an interrupted job left that open."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ..agents import Reference
from ..loop import JobEnd, JobStart, LoopObserver, LoopState, ProblemResult, Step
from ..problems import Problem
from ..workload.record import WorkloadRecord
from .schema import Metrics, Params, Tags
from .tracker import Tracker


def problem_tags(problem: Problem, reference: Reference | None) -> dict[str, str]:
    """A problem run's own tags (beside the job's labels)."""
    return {Tags.PROBLEM: problem.key, Tags.LEVEL: str(problem.level), Tags.SIZE: problem.size,
            Tags.REFERENCE_AVAILABLE: str(reference is not None).lower(),
            Tags.REFERENCE_SOURCE: reference.source if reference else "none"}


def problem_run_name(problem: Problem, loop_mode: str) -> str:
    """``L1/3_LayerNorm · iterative``: the problem and the arm, so two arms' rows are told apart."""
    where = f"L{problem.level}/{problem.name}" if problem.level is not None else problem.name
    return f"{where} · {loop_mode}"


@dataclass
class JobRun:
    """What a job's parent run says of it."""

    name: str
    """The run's name (`kforge.job.pipeline.job_run_name`: model, backend, loop mode, levels)."""
    config: dict[str, Any]
    """The job's configuration, logged as parameters (flattened) and as ``config.yaml``."""
    config_yaml: str
    labels: dict[str, str]
    """What the job ran with: tags of the parent and of every problem run (`kforge.job.pipeline.job_labels`)."""
    tags: dict[str, str] = field(default_factory=dict)
    """The parent's other tags (hardware, Hydra's job, reference availability)."""
    speedup_vs: str = "eager"
    previous: str | None = None
    """The parent run of an earlier job with this configuration: continued instead of a new one."""
    previous_open: bool = False
    """``previous`` was left KILLED or RUNNING: a job with nothing left to run closes it (FINISHED, with the
    figures of every problem), as a rerun with something to run does."""

    def params(self, problem: Problem | None = None) -> dict[str, str]:
        """The parameters MLflow groups runs by (`schema.Params`): the job's, and the problem's own."""
        out = {p: self.labels.get(p, "") for p in Params.JOB}
        if problem is not None:
            out.update({Params.LEVEL: str(problem.level), Params.PROBLEM: problem.key})
        return out


class MlflowObserver(LoopObserver):
    """Writes one job: its parent run, and each problem as a run nested under it.

    ``continued``: problem key -> the run an earlier job was cut off in; that run is reopened and
    continued, not started anew (the loop gets the state it was left in from `resume`).
    """

    def __init__(self, tracker: Tracker, job: JobRun, continued: dict[str, str] | None = None):
        self.tracker, self.job = tracker, job
        self.continued = continued or {}
        self.parent_id: str | None = None
        """The job's parent run, once the job has started with something to run."""
        self.run_ids: dict[str, str] = {}
        """Problem key -> its run, for every problem started."""
        self._open: set[str] = set()
        self._ran_nothing = False
        self._lock = threading.Lock()

    # -- the job -----------------------------------------------------------------------------------------
    def job_started(self, start: JobStart) -> None:
        job = self.job
        if not start.todo:
            # Nothing to run: no run to leave empty, but an earlier parent an interrupted job left open is closed.
            if job.previous is not None and job.previous_open:
                self.tracker.reopen_parent(job.previous, {**job.labels, **job.tags})
                self.parent_id, self._ran_nothing = job.previous, True
            return
        if job.previous is not None:
            self.tracker.reopen_parent(job.previous, {**job.labels, **job.tags})
            self.parent_id = job.previous
        else:
            self.parent_id = self.tracker.start_parent(job.name, job.config, job.config_yaml,
                                                       {**job.labels, **job.tags}, job.params())

    def job_ended(self, end: JobEnd) -> None:
        if self.parent_id is None:
            return
        self._kill_open()
        counts = {Metrics.VERIFICATIONS: end.verifications, Metrics.PROBLEMS_SKIPPED: end.done_before,
                  Metrics.PROBLEM_ERRORS: len(end.skipped)}
        if self._ran_nothing:  # the earlier job's count stands: this one verified nothing
            del counts[Metrics.VERIFICATIONS]
        self.tracker.end_parent(self.parent_id, end.results, end.stats,
                                status="KILLED" if end.interrupted else "FINISHED", speedup_vs=self.job.speedup_vs,
                                counts=counts)

    def workload_done(self, record: WorkloadRecord) -> None:
        # A rerun with nothing left to run (every region finished earlier) assembles the model again and opens no
        # run: the outcome goes on the parent run of the earlier job whose regions it assembled.
        run_id = self.parent_id or self.job.previous
        if run_id is not None:
            self.tracker.log_workload(run_id, record)

    def _kill_open(self) -> None:
        """Mark KILLED the runs of problems that never ended (still in a model call after a second Ctrl-C)."""
        with self._lock:
            left, self._open = self._open, set()
        for key in left:
            self.tracker.kill(self.run_ids[key])

    # -- each problem ------------------------------------------------------------------------------------
    def problem_started(self, problem: Problem, reference: Reference | None, resume: LoopState | None) -> None:
        rid = self.continued.get(problem.key)
        if rid is not None:
            self.tracker.reopen(rid)
        else:
            rid = self.tracker.start_problem(
                self.parent_id, problem_run_name(problem, self.job.labels.get(Tags.LOOP_MODE, "")),
                {**self.job.labels, **problem_tags(problem, reference)}, self.job.params(problem))
        with self._lock:
            self.run_ids[problem.key] = rid
            self._open.add(problem.key)

    def iteration_done(self, problem: Problem, step: Step) -> None:
        self.tracker.log_iteration(self.run_ids[problem.key], step.record, step.attempt, step.verdict,
                                   step.recommendation, step.outcome)

    def problem_ended(self, problem: Problem, result: ProblemResult) -> None:
        # A kforge error makes the run FAILED whatever the status (`Tracker.end_problem`).
        self.tracker.end_problem(self.run_ids[problem.key], result,
                                 status="KILLED" if result.stopped else "FINISHED")
        self._closed(problem)

    def problem_skipped(self, problem: Problem, result: ProblemResult) -> None:
        self.tracker.skip_problem(self.run_ids[problem.key], result.problem_error or "")
        self._closed(problem)

    def problem_abandoned(self, problem: Problem) -> None:
        self.tracker.kill(self.run_ids[problem.key])
        self._closed(problem)

    def _closed(self, problem: Problem) -> None:
        with self._lock:
            self._open.discard(problem.key)
