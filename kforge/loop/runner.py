"""The runner: one `ProblemLoop` runs a problem with a `SearchStrategy` (the chain or beam search) and tells
its observers; `run_problems` runs a job's problems concurrently and tells the job's events.

Problems run concurrently, sharing the verifier's worker pool, so model calls overlap builds and timing.
Everything a job does is told to its `LoopObserver`s (MLflow tracking, the console): the job's start,
each problem's start, iterations and end, a Ctrl-C, and the job's end. A problem the verifier finds broken
(a `ProblemError`) is skipped with a notice and the sweep goes on; one broken by kforge ends with
``result.error``; neither takes the sweep down.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from typing import Any, Sequence

from ..agents import GenerationAgent, Reference
from ..llm import ModelUnreachable
from ..problems import Problem, ProblemError
from .advice import Advisor, GenericAdvisor
from .beam import BeamSearch
from .chain import ChainSearch
from .config import LoopConfig
from .finalists import MeasuredOnce, settle
from .records import JobEnd, JobStart, LoopObserver, LoopState, ProblemResult, job_stats
from .step import stopping
from .strategy import LoopVerifier, SearchStrategy

log = logging.getLogger(__name__)

def strategy_for(config: LoopConfig) -> SearchStrategy:
    return BeamSearch() if config.mode == "beam" else ChainSearch()


class ProblemLoop:
    """Runs one problem to its end with the strategy ``config.mode`` names; `run_problems` runs many.
    Strategies use its ``agent``, ``verifier``, ``advisor``, ``config``, ``stop`` and `tell`."""

    def __init__(self, agent: GenerationAgent, verifier: LoopVerifier, config: LoopConfig,
                 advisor: Advisor | None = None, observers: Sequence[LoopObserver] = (),
                 stop: threading.Event | None = None, strategy: SearchStrategy | None = None):
        self.stop = stop or threading.Event()
        # A kernel met again in a problem is not verified again (kforge.loop.finalists).
        self.agent, self.verifier, self.config = agent, MeasuredOnce(verifier, self.stop), config
        self.advisor: Advisor = advisor or GenericAdvisor()
        self.observers = list(observers)
        self.strategy = strategy or strategy_for(config)
        self.unreachable: str | None = None
        """Why the job stopped on its own: the model's server answered no call (`ModelUnreachable`)."""

    def tell(self, event: str, *args: Any) -> None:
        """Tell every observer ``event`` (a `LoopObserver` method), in order."""
        for observer in self.observers:
            getattr(observer, event)(*args)

    def run(self, problem: Problem, reference: Reference | None = None,
            resume: LoopState | None = None) -> ProblemResult:
        """Run ``problem`` to its end, from ``resume`` where an earlier run was cut off.

        A broken problem is skipped (``result.problem_error``, event ``problem_skipped``). A model nothing answers
        for stops the job (``unreachable``) and leaves the problem cut off, for a rerun to continue. Another kforge
        error ends the problem with ``result.error`` (or ``stopped``, when the stop event is set, e.g. the
        pool closed under a verification by a second Ctrl-C) instead of going up.
        """
        state = resume or LoopState(ProblemResult(problem))
        self.tell("problem_started", problem, reference, resume)
        try:
            self.strategy.search(self, problem, reference, state)
            if not state.result.stopped:
                settle(self, problem, state.result)  # the finalists re-timed against each other
        except ModelUnreachable as exc:  # no model to ask: the job stops, and this problem is cut off, not failed
            self.unreachable = self.unreachable or str(exc)
            self.stop.set()
            state.result.stopped = True
        except ProblemError as exc:  # a malformed problem file, or one that fails when run (`ProblemFails`)
            state.result.problem_error = traceback.format_exc()
            log.warning("kforge: %s skipped: the problem itself fails (%s); the sweep goes on",
                        problem.key, str(exc).splitlines()[0])
            self.tell("problem_skipped", problem, state.result)
            return state.result
        except Exception:  # noqa: BLE001 - recorded where the user will look (observers), then go on
            if not stopping(self, state.result):
                state.result.error = traceback.format_exc()
        except BaseException:
            self.tell("problem_abandoned", problem)
            raise
        self.tell("problem_ended", problem, state.result)
        return state.result


class Interrupted(KeyboardInterrupt):
    """`run_problems` was interrupted; ``end`` says how the job ended (``end.ended``: every problem that
    ended, finished or stopped)."""

    def __init__(self, end: JobEnd):
        super().__init__()
        self.end = end


class _Sweep:
    """One job's problems on ``concurrency`` daemon threads (after a second Ctrl-C the process may exit
    while one still waits on a model), results collected in the caller's thread."""

    def __init__(self, problems: list[Problem], loop: ProblemLoop, concurrency: int,
                 references: dict[str, Reference | None], resumes: dict[str, LoopState]):
        self.problems, self.loop, self.references, self.resumes = problems, loop, references, resumes
        self.todo = list(problems)
        self.lock = threading.Lock()
        self.ended: queue.Queue[ProblemResult] = queue.Queue()
        self.results: dict[str, ProblemResult] = {}
        self.in_flight: set[str] = set()
        self.threads = [threading.Thread(target=self.worker, name=f"kforge-loop-{i}", daemon=True)
                        for i in range(max(1, min(concurrency, len(problems))))]

    def one(self, p: Problem) -> ProblemResult:
        resume = self.resumes.get(p.key)
        try:
            return self.loop.run(p, self.references.get(p.key), resume)
        except Exception:  # noqa: BLE001 - an observer failed outside the loop's own guard (e.g. starting a run)
            r = resume.result if resume else ProblemResult(p)
            if not stopping(self.loop, r):
                r.error = traceback.format_exc()
            return r

    def worker(self) -> None:
        while True:
            with self.lock:
                if self.loop.stop.is_set() or not self.todo:
                    return
                p = self.todo.pop(0)
                self.in_flight.add(p.key)
            r = self.one(p)
            with self.lock:
                self.in_flight.discard(p.key)
            self.ended.put(r)

    def collect(self, wait_all: bool) -> None:
        """Take the loops that ended; with ``wait_all``, until every thread has ended."""
        while True:
            try:
                r = self.ended.get(timeout=0.2)
            except queue.Empty:
                if (wait_all and any(t.is_alive() for t in self.threads)) or not self.ended.empty():
                    continue
                return
            self.results[r.problem.key] = r
            self.loop.tell("problem_collected", r)

    def stop_now(self) -> None:
        """A Ctrl-C: no new work, those in flight end after their step; a second one aborts them."""
        self.loop.stop.set()
        with self.lock:
            self.todo.clear()
            n = len(self.in_flight)
        self.loop.tell("job_stopping", n)
        try:
            self.collect(wait_all=True)
        except KeyboardInterrupt:
            self.loop.tell("job_aborting")
            deadline = time.monotonic() + 10.0  # loops in a verification end at once; model calls are not waited for
            while time.monotonic() < deadline and any(t.is_alive() for t in self.threads):
                self.collect(wait_all=False)
            self.collect(wait_all=False)

    def ordered(self) -> list[ProblemResult]:
        return [self.results[p.key] for p in self.problems if p.key in self.results]


def run_problems(problems: list[Problem], loop: ProblemLoop, *, concurrency: int = 1,
                 references: dict[str, Reference | None] | None = None,
                 resumes: dict[str, LoopState] | None = None, done: Sequence[ProblemResult] = ()) -> JobEnd:
    """Run a job: problem loops, ``concurrency`` at a time; ``resumes`` holds the state of each problem an
    earlier job was cut off in, ``done`` the results of those it finished (not run again, counted).

    A KeyboardInterrupt (Ctrl-C; the pipeline turns SIGTERM into one) stops new work: problems not yet
    started are dropped (event ``job_stopping``), and those in flight end after their current step
    (``ProblemResult.stopped``). A second KeyboardInterrupt while waiting tells ``job_aborting`` (the
    pipeline closes the worker pool, so verifications in flight end at once) and stops waiting for loops
    still blocked in a model call. The job's end is told (``job_ended``) either way; `Interrupted` is then
    raised with it.
    """
    done = list(done)
    loop.tell("job_started", JobStart(list(problems), done))
    sweep = _Sweep(problems, loop, concurrency, references or {}, resumes or {})
    runs_before = loop.verifier.pool.counters["run"] - loop.verifier.retimings  # first verifications only
    interrupted = False
    for t in sweep.threads:
        t.start()
    try:
        sweep.collect(wait_all=True)
        if loop.unreachable:  # the loops in flight end after their step, cut off; a rerun continues them
            interrupted = True
            sweep.collect(wait_all=True)
    except KeyboardInterrupt:
        interrupted = True
        sweep.stop_now()
    ended = sweep.ordered()
    # Finished problems (earlier ones included) make the job's figures; cut-off and skipped ones do not.
    results = done + [r for r in ended if not r.stopped and not r.problem_error]
    end = JobEnd(results, job_stats(results, loop.config.speedup_vs), ended, len(done),
                 loop.verifier.pool.counters["run"] - loop.verifier.retimings - runs_before, interrupted,
                 why=loop.unreachable)
    loop.tell("job_ended", end)
    if interrupted:
        raise Interrupted(end) from None
    return end
