"""The refinement loop (KForge §3): a functional pass until correct, then optimisation passes.

Per problem: a single-shot generation; then, in ``iterative`` mode, each later iteration either fixes
the latest failure from the verifier's evidence (functional pass) or, once a correct kernel exists,
asks the advisor for one recommendation and the generation agent for a faster program (optimisation
pass). A failed optimisation gets ``max_fixes_in_optimisation`` fix attempts before the loop returns
to optimising the best kernel. The best correct kernel is kept. Problems run concurrently, sharing the
verifier's worker pool, so model calls overlap builds and timing.

Iterations are numbered from 0 (``IterationRecord.iteration``, MLflow's step, ``iter_NNN/``).
What a loop does is told to its `LoopObserver`s (MLflow tracking, the console); a job cut off earlier
continues from the `LoopState` it was left in.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from ..agents import GenerationAgent, Recommendation, Reference
from ..agents.analysis import GENERIC_RECOMMENDATION, generic_directions
from ..metrics import BASELINES
from ..strict import StrictConfig
from ..problems import Problem
from ..verify import Verdict, Verifier
from .records import LoopObserver, LoopState, ProblemResult, Step, make_record


MODES = ("single_shot", "iterative", "beam")


@dataclass
class LoopConfig(StrictConfig):
    """How the loop runs (``conf/loop/*.yaml``)."""

    mode: str = "iterative"
    """``single_shot`` (one generation per problem), ``iterative`` (fix, then optimise) or ``beam`` (a
    search tree of optimisations, `kforge.loop.beam`)."""
    iterations: int = 5
    """Generation calls per problem at most, the first included (`budget`: single_shot makes one; beam
    takes it as its model-call budget unless ``max_calls`` is set)."""
    target_speedup: float | None = None
    """Stop a problem early once its best speedup reaches this (None: use every iteration)."""
    speedup_vs: str = "eager"
    """Baseline that ranks kernels and meets the target: ``eager`` or ``compile``."""
    concurrency: int = 2
    """Problem loops in flight at once."""
    max_fixes_in_optimisation: int = 1
    """Fix attempts for a failed optimisation before optimising the best kernel again (beam: per child)."""
    width: int = 3
    """Beam: children per kept node per round, one per distinct recommendation class."""
    beam: int = 2
    """Beam: nodes kept per round (the fastest correct children, of distinct classes where possible)."""
    depth: int = 3
    """Beam: optimisation rounds after round 0 (the first kernel and its fixes)."""
    max_calls: int | None = None
    """Beam: model calls per problem at most, analysis-model calls included (None: ``iterations``)."""
    max_cost_usd: float | None = None
    """Beam: no new model call once a problem's calls cost this much (None: no dollar limit)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"loop.mode must be {', '.join(MODES[:-1])} or {MODES[-1]}, not {self.mode!r}")
        if self.speedup_vs not in BASELINES:
            raise ValueError(f"loop.speedup_vs must be {' or '.join(BASELINES)}, not {self.speedup_vs!r}")
        if self.iterations < 1:
            raise ValueError("loop.iterations must be at least 1")
        for name in ("width", "beam", "depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"loop.{name} must be at least 1")
        if self.max_calls is not None and self.max_calls < 1:
            raise ValueError("loop.max_calls must be at least 1 (or null: loop.iterations)")
        if self.max_cost_usd is not None and self.max_cost_usd <= 0:
            raise ValueError("loop.max_cost_usd must be positive (or null: no dollar limit)")

    @property
    def budget(self) -> int:
        """Iterations a problem gets: single_shot means one, whatever ``iterations`` says; beam, its model
        calls (each node is one generation call)."""
        if self.mode == "beam":
            return self.max_calls or self.iterations
        return 1 if self.mode == "single_shot" else self.iterations


class Advisor(Protocol):
    """Profiles a correct kernel and recommends one change (D's analysis agent implements this)."""

    def recommend(self, problem: Problem, code: str, verdict: Verdict, iteration: int = 0) -> Recommendation: ...


class GenericAdvisor:
    """No profiling: the same generic request every round (beam search: distinct generic directions)."""

    model_calls = 0
    """Model calls a recommendation costs (beam search budgets them)."""

    def recommend(self, problem: Problem, code: str, verdict: Verdict, iteration: int = 0) -> Recommendation:
        return Recommendation(action=GENERIC_RECOMMENDATION)

    def recommend_many(self, problem: Problem, code: str, verdict: Verdict, k: int,
                       iteration: int = 0) -> list[Recommendation]:
        return generic_directions(k)


class ProblemLoop:
    """Runs one problem to completion; `run_problems` runs many."""

    def __init__(self, agent: GenerationAgent, verifier: Verifier, config: LoopConfig,
                 advisor: Advisor | None = None, observers: Sequence[LoopObserver] = (),
                 stop: threading.Event | None = None):
        self.agent, self.verifier, self.config = agent, verifier, config
        self.advisor = advisor or GenericAdvisor()
        self.observers = list(observers)
        self.stop = stop or threading.Event()

    def _tell(self, event: str, *args: Any) -> None:
        for observer in self.observers:
            getattr(observer, event)(*args)

    def run(self, problem: Problem, reference: Reference | None = None,
            resume: LoopState | None = None) -> ProblemResult:
        """Run ``problem`` to its end, from ``resume`` where an earlier run was cut off.

        A kforge error ends the problem with ``result.error`` (or ``stopped``, when the stop event is set,
        e.g. the pool closed under a verification by a second Ctrl-C) instead of going up: one broken
        problem must not take the sweep down.
        """
        state = resume or LoopState(ProblemResult(problem))
        self._tell("problem_started", problem, reference, resume)
        try:
            self._iterate(problem, reference, state)
        except Exception:  # noqa: BLE001 - recorded where the user will look (observers), then go on
            if self.stop.is_set():
                state.result.stopped = True
            else:
                state.result.error = traceback.format_exc()
        except BaseException:
            self._tell("problem_abandoned", problem)
            raise
        self._tell("problem_ended", problem, state.result)
        return state.result

    def _iterate(self, problem: Problem, reference: Reference | None, state: LoopState) -> None:
        """Iterations ``state.next_iteration``.. of the budget, updating ``state`` after each."""
        cfg = self.config
        result = state.result
        fixes_in_opt = 0
        for it in range(state.next_iteration, cfg.budget):
            if self.stop.is_set():
                result.stopped = True
                break
            last_code, last_verdict = state.last_code, state.last_verdict
            t0 = time.monotonic()
            recommendation: Recommendation | None = None
            analysis_s = 0.0
            if it == 0 or (last_verdict is None and result.best_verdict is None):
                attempt = self.agent.single_shot(problem, reference, iteration=it)
            elif last_verdict is not None and not last_verdict.correct and (
                    result.best_verdict is None or fixes_in_opt < cfg.max_fixes_in_optimisation):
                if result.best_verdict is not None:
                    fixes_in_opt += 1
                attempt = self.agent.fix(problem, last_code, last_verdict, iteration=it)
            elif result.best_verdict is not None and result.best_verdict.runtime is None:
                break  # verified without timing (verify.skip_timing): no speed to optimise against
            else:
                fixes_in_opt = 0
                a0 = time.monotonic()
                recommendation = self.advisor.recommend(problem, result.best_code, result.best_verdict,
                                                        iteration=it)
                analysis_s = time.monotonic() - a0
                attempt = self.agent.optimise(problem, result.best_code, result.best_verdict,
                                              recommendation.text(), iteration=it)
            llm_s = time.monotonic() - t0 - analysis_s
            if self.stop.is_set():  # stopped during the model call: not verified, so not recorded; a rerun replays it
                result.stopped = True
                break
            v0 = time.monotonic()
            verdict = self.verifier.verify(problem, attempt.candidate, self.agent.backend)
            verify_s = time.monotonic() - v0
            is_best = result.offer(attempt.candidate.source, verdict, it, cfg.speedup_vs)
            record = make_record(it, attempt, verdict, recommendation, is_best=is_best, llm_s=llm_s,
                                 verify_s=verify_s, analysis_s=analysis_s, wall_s=time.monotonic() - t0)
            result.records.append(record)
            self._tell("iteration_done", problem, Step(record, attempt, verdict, recommendation))
            state.next_iteration, state.last_code, state.last_verdict = it + 1, attempt.candidate.source, verdict
            if result.reached(cfg.target_speedup, cfg.speedup_vs):
                break


class Interrupted(KeyboardInterrupt):
    """`run_problems` was interrupted; ``results`` holds every problem that ended, finished or stopped."""

    def __init__(self, results: list[ProblemResult]):
        super().__init__()
        self.results = results


def run_problems(problems: list[Problem], loop: ProblemLoop, *, concurrency: int = 1,
                 references: dict[str, Reference | None] | None = None,
                 on_done: Callable[[ProblemResult], None] | None = None,
                 on_stop: Callable[[int], None] | None = None,
                 on_abort: Callable[[], None] | None = None,
                 resumes: dict[str, LoopState] | None = None) -> list[ProblemResult]:
    """Run problem loops, ``concurrency`` at a time, and return their results in ``problems`` order;
    ``resumes`` holds the state of each problem an earlier job was cut off in.

    A KeyboardInterrupt (Ctrl-C; the pipeline turns SIGTERM into one) stops new work: problems not yet
    started are dropped, ``on_stop(n)`` is told how many are in flight, and those end after their
    current step (``ProblemResult.stopped``). Then `Interrupted` is raised with every result. A second
    KeyboardInterrupt while waiting calls ``on_abort`` (e.g. closing the worker pool, so verifications
    in flight end at once) and stops waiting for loops still blocked in a model call.
    """
    references, resumes = references or {}, resumes or {}
    todo = list(problems)
    lock = threading.Lock()
    ended: queue.Queue[ProblemResult] = queue.Queue()
    results: dict[str, ProblemResult] = {}
    in_flight: set[str] = set()

    def one(p: Problem) -> ProblemResult:
        resume = resumes.get(p.key)
        try:
            return loop.run(p, references.get(p.key), resume)
        except Exception:  # noqa: BLE001 - an observer failed outside the loop's own guard (e.g. starting a run)
            r = resume.result if resume else ProblemResult(p)
            if loop.stop.is_set():
                r.stopped = True
            else:
                r.error = traceback.format_exc()
            return r

    def worker() -> None:
        while True:
            with lock:
                if loop.stop.is_set() or not todo:
                    return
                p = todo.pop(0)
                in_flight.add(p.key)
            r = one(p)
            with lock:
                in_flight.discard(p.key)
            ended.put(r)

    # Daemon threads: after a second Ctrl-C the process may exit while one still waits on a model.
    threads = [threading.Thread(target=worker, name=f"kforge-loop-{i}", daemon=True)
               for i in range(max(1, min(concurrency, len(problems))))]
    for t in threads:
        t.start()

    def collect(wait_all: bool) -> None:
        """Record the loops that ended; with ``wait_all``, until every thread has ended."""
        while True:
            try:
                r = ended.get(timeout=0.2)
            except queue.Empty:
                if (wait_all and any(t.is_alive() for t in threads)) or not ended.empty():
                    continue
                return
            results[r.problem.key] = r
            if on_done:
                on_done(r)

    def ordered() -> list[ProblemResult]:
        return [results[p.key] for p in problems if p.key in results]

    try:
        collect(wait_all=True)
    except KeyboardInterrupt:
        loop.stop.set()
        with lock:
            todo.clear()
            n = len(in_flight)
        if on_stop:
            on_stop(n)
        try:
            collect(wait_all=True)
        except KeyboardInterrupt:
            if on_abort:
                on_abort()
            deadline = time.monotonic() + 10.0  # loops in a verification end at once; model calls are not waited for
            while time.monotonic() < deadline and any(t.is_alive() for t in threads):
                collect(wait_all=False)
            collect(wait_all=False)
        raise Interrupted(ordered()) from None
    return ordered()
