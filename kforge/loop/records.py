"""What a problem loop records and tells: one iteration's `IterationRecord`, a problem's `ProblemResult`,
the `LoopState` a resumed job continues from, and the `LoopObserver` protocol its observers (MLflow
tracking, the console) implement: a job's events (`JobStart`, `JobEnd`) and each problem's.

A per-iteration metric is a number field on `IterationRecord`, set in `make_record`: the tracker logs it
under its field name (`kforge.tracking.schema` derives the metric list from this dataclass).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..agents import Attempt, Recommendation, Reference
from ..metrics import speedup_over, summary, total_cost
from ..problems import Problem
from ..verify import Verdict
from ..verify.retime import Speedup, measured

if TYPE_CHECKING:
    from ..workload.record import WorkloadRecord


@dataclass
class IterationRecord:
    """What one iteration did and cost."""

    iteration: int
    phase: str
    state: str
    correct: bool
    message: str
    correct_kernelbench: bool = False
    """Correct under KernelBench's rules (matching outputs suffice; `kforge.verify.rules`), beside ``correct``
    under the job's, so a paper can count both ways."""
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    runtime_ms: float | None = None
    speed_of_light: float | None = None
    kernel_share: float | None = None
    """Share of the forward's device time in the candidate's own kernels (the verdict's attribution)."""
    problem_flags: list[str] = field(default_factory=list)
    """The problem audit's flags (stochastic, degenerate, launch_bound)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    llm_s: float = 0.0
    verify_s: float = 0.0
    analysis_s: float = 0.0
    wall_s: float = 0.0
    cached_reply: bool = False
    replayed_calls: int = 0
    """Model calls of this iteration answered from the cache or by replay (`kforge.llm.replay`): no call was
    made, and their tokens are not in ``prompt_tokens``/``completion_tokens`` (a rerun counts nothing twice)."""
    is_best: bool = False
    recommendation: str | None = None
    parent: int | None = None
    """Beam search: the node (iteration) whose kernel this one was derived from; None for the root, and
    outside beam, where each iteration follows the one before. A node's own id is its ``iteration``."""
    depth: int | None = None
    """Beam search: the round that made this node (0: the first kernel and its fixes)."""
    direction: str | None = None
    """Beam search: the recommendation class of the node's branch (`Recommendation.category`)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProblemResult:
    problem: Problem
    records: list[IterationRecord] = field(default_factory=list)
    best_code: str | None = None
    best_verdict: Verdict | None = None
    best_iteration: int | None = None
    error: str | None = None
    """An unexpected failure of the loop itself (not of a candidate)."""
    stopped: bool = False
    """Cut off by Ctrl-C or SIGTERM before its last iteration: a rerun continues it."""
    problem_error: str | None = None
    """The problem itself is broken (a `kforge.problems.ProblemError` from the verifier): skipped, its traceback."""
    timings: dict[str, list[Verdict]] = field(default_factory=dict)
    """Every verification of each correct kernel, by source hash: a kernel met again pools its timings."""
    kernels: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    """Each correct kernel's code and the iteration it first came in, by source hash."""
    settled: dict[str, Speedup] = field(default_factory=dict)
    """The best kernel's speedup per baseline after the finalists were re-timed against each other at the end of
    the problem (`kforge.loop.finalists`); empty where none competed: its own timings then say it."""

    @property
    def correct(self) -> bool:
        """Solved: some iteration was correct (the best kernel is one)."""
        return self.best_verdict is not None

    @property
    def outcome(self) -> str:
        """The problem's state: ``correct`` once any iteration was, else its last iteration's state;
        ``problem_error`` for a skipped problem, ``error`` or ``none`` without an iteration."""
        if self.problem_error:
            return "problem_error"
        if self.correct:
            return "correct"
        return self.records[-1].state if self.records else ("error" if self.error else "none")

    def best_speedup(self, vs: str) -> float | None:
        """The best kernel's speedup over ``vs`` (eager where ``compile`` was not timed); None if unsolved."""
        s = self.speed(vs) or (self.speed("eager") if vs != "eager" else None)
        return s.value if s is not None else None

    def speed(self, vs: str) -> Speedup | None:
        """The best kernel's speedup over ``vs`` with its interval, as reported: re-timed against the other
        finalists (`settled`), else the median of its own timings; None if unsolved or untimed."""
        if self.best_verdict is None:
            return None
        return self.settled.get(vs) or measured(self._pool(_key(self.best_code, self.best_verdict)), vs)

    def offer(self, code: str | None, verdict: Verdict, iteration: int, vs: str) -> bool:
        """Keep this kernel as the best if it is correct and its figure (the median of every timing of its source,
        `kforge.verify.retime.measured`) ranks above the best's; whether it did. A kernel met again is no new
        result: its timing joins the others of its source, and it never becomes the best a second time, whatever
        this timing says (keeping the largest of several noisy timings rewards noise)."""
        if not verdict.correct:
            return False
        key = self.remember(code, verdict, iteration)
        better = self.best_verdict is None or (key != _key(self.best_code, self.best_verdict) and
                                               self.rank(key, vs) > self.rank(_key(self.best_code,
                                                                                   self.best_verdict), vs))
        if better:
            self.best_code, self.best_verdict, self.best_iteration = code, verdict, iteration
        return better

    def remember(self, code: str | None, verdict: Verdict, iteration: int) -> str:
        """Pool a correct kernel's timing under its source hash (and its code, the first time): what `offer` ranks
        by, and what a resumed problem restores for every correct iteration it had, so that its finalists and
        every later offer weigh the kernels from before the interruption too. Its source hash."""
        key = _key(code, verdict)
        pool = self.timings.setdefault(key, [])
        if not any(v is verdict for v in pool):
            pool.append(verdict)
        self.kernels.setdefault(key, (code, iteration))
        return key

    def rank(self, key: str, vs: str) -> float:
        """What ranks a correct kernel (by source hash): the median of its timings over ``vs`` (eager where
        ``compile`` was not timed)."""
        pool = self._pool(key)
        s = measured(pool, vs) or (measured(pool, "eager") if vs != "eager" else None)
        return s.value if s is not None else 0.0

    def finalists(self, k: int, vs: str) -> list[str]:
        """The source hashes of the ``k`` best-ranked correct kernels whose code is known, best first."""
        known = [key for key, (code, _) in self.kernels.items() if code is not None]
        return sorted(known, key=lambda key: self.rank(key, vs), reverse=True)[:k]

    def settle(self, retimed: dict[str, list[Verdict]], vs: str) -> None:
        """The finalists' re-timed verifications by source hash: the best is the one whose re-timed figure ranks
        first, and its re-timed figures (median and interval) are what the problem reports."""
        figures = {k: measured(v, vs) or measured(v, "eager") for k, v in retimed.items() if v}
        if not figures:
            return
        key = max(figures, key=lambda k: figures[k].value)
        code, iteration = self.kernels[key]
        self.best_code, self.best_verdict, self.best_iteration = code, self._pool(key)[0], iteration
        self.settled = {b: s for b in ("eager", "compile") if (s := measured(retimed[key], b)) is not None}

    def _pool(self, key: str) -> list[Verdict]:
        # A best kernel restored from MLflow (resume) came in without an offer: its own verdict is its timing.
        return self.timings.get(key) or ([self.best_verdict] if self.best_verdict is not None else [])

    def reached(self, target: float | None, vs: str) -> bool:
        """Whether the best kernel meets ``loop.target_speedup`` (None: no target)."""
        return bool(target) and self.best_verdict is not None and (self.best_speedup(vs) or 0.0) >= target

    @property
    def speedup_eager(self) -> float | None:
        s = self.speed("eager")
        return s.value if s is not None else None

    @property
    def speedup_compile(self) -> float | None:
        s = self.speed("compile")
        return s.value if s is not None else None

    @property
    def kernel_share(self) -> float | None:
        return self.best_verdict.kernel_share if self.best_verdict else None

    @property
    def problem_flags(self) -> list[str]:
        """The audit's flags, from any iteration's verdict (an iteration that never ran a candidate has none)."""
        return next((r.problem_flags for r in reversed(self.records) if r.problem_flags), [])


@dataclass
class LoopState:
    """Where a problem's loop stands between iterations; a resumed job passes the state its earlier run
    was cut off in (`kforge.tracking.resume` rebuilds it from MLflow)."""

    result: ProblemResult
    next_iteration: int = 0
    last_code: str | None = None
    last_verdict: Verdict | None = None
    kernels: dict[int, tuple[str | None, Verdict, IterationRecord]] = field(default_factory=dict)
    """Every restored iteration's kernel, verdict and record by id: a beam search resumes its tree from them."""


@dataclass
class Step:
    """One recorded iteration, as observers get it."""

    record: IterationRecord
    attempt: Attempt
    verdict: Verdict
    recommendation: Recommendation | None = None
    outcome: str = ""
    """The problem's state after this iteration (`ProblemResult.outcome`)."""


@dataclass
class JobStart:
    """What a job is about to run (`LoopObserver.job_started`)."""

    todo: list[Problem]
    """The problems this job runs (new ones, and ones an earlier job was cut off in)."""
    done: list[ProblemResult] = field(default_factory=list)
    """Problems an earlier job with this configuration finished: not run again, counted in the figures."""


@dataclass
class JobEnd:
    """How a job ended (`LoopObserver.job_ended`)."""

    results: list[ProblemResult]
    """Every finished problem, earlier jobs' included: what the job's figures count."""
    stats: dict[str, Any]
    """`job_stats` of ``results``."""
    ended: list[ProblemResult] = field(default_factory=list)
    """What this job ran, however each ended (finished, stopped, failed, skipped)."""
    done_before: int = 0
    """Problems finished by an earlier job."""
    verifications: int = 0
    """Candidates this job verified."""
    interrupted: bool = False
    why: str | None = None
    """What stopped an interrupted job, where it was not the user (a model server nothing answered at)."""

    @property
    def skipped(self) -> list[ProblemResult]:
        """Problems skipped because the problem itself is broken."""
        return [r for r in self.ended if r.problem_error]


class LoopObserver(Protocol):
    """What a job and its problem loops tell (MLflow tracking, the progress lines). Problem events come
    from that problem's loop thread, job events and `problem_collected` from the runner's thread, each in
    the order the observers were given; an error raised in a problem event fails that problem."""

    def job_started(self, job: JobStart) -> None:
        """Before any problem starts."""

    def job_stopping(self, in_flight: int) -> None:
        """The first Ctrl-C (or SIGTERM): no new problem starts; ``in_flight`` end after their current step."""

    def job_aborting(self) -> None:
        """A second Ctrl-C: verifications in flight are to end at once."""

    def job_ended(self, end: JobEnd) -> None:
        """After the last problem was collected, interrupted or not."""

    def workload_done(self, record: WorkloadRecord) -> None:
        """A whole-model job (``workload=``): its regions' best kernels were put back into the model and the
        model verified whole, or why not (``record.state``). Told once, after the last problem and before the
        other observers hear ``job_ended`` (the job's first observer, `kforge.job.workload.WorkloadStage`,
        tells it from its own), so the job's parent run is still open."""

    def problem_collected(self, result: ProblemResult) -> None:
        """The runner has a problem's result, however it ended."""

    def problem_skipped(self, problem: Problem, result: ProblemResult) -> None:
        """The problem itself is broken (``result.problem_error``): skipped, the sweep goes on."""

    def problem_started(self, problem: Problem, reference: Reference | None, resume: LoopState | None) -> None:
        """Before the first iteration; ``resume`` is the state a continued run starts from."""

    def iteration_done(self, problem: Problem, step: Step) -> None:
        """After each iteration's verification."""

    def problem_ended(self, problem: Problem, result: ProblemResult) -> None:
        """The problem ended: finished, ``stopped`` (Ctrl-C, SIGTERM) or with an ``error`` of kforge's."""

    def problem_abandoned(self, problem: Problem) -> None:
        """Left without a result (a BaseException other than a kforge error went through the loop)."""


def _key(code: str | None, verdict: Verdict) -> str:
    """A kernel's source hash (the verdict's; a verdict made without one: its code's)."""
    if verdict.source_hash:
        return verdict.source_hash
    import hashlib
    return hashlib.sha256((code or "").encode()).hexdigest()[:16]


def rank_speedup(verdict: Verdict, vs: str) -> float:
    """What ranks correct kernels and meets ``target_speedup``."""
    return speedup_over(vs, verdict.speedup_eager, verdict.speedup_compile, or_eager=True) or 0.0


def job_stats(results: list[ProblemResult], speedup_vs: str) -> dict[str, Any]:
    """A job's figures over its finished problems: `kforge.metrics.summary`'s, tokens and cost."""
    outcomes = [(r.correct, r.best_speedup(speedup_vs)) for r in results]
    stats = summary(outcomes)
    records = [x for r in results for x in r.records]
    stats["total_prompt_tokens"] = sum(x.prompt_tokens for x in records)
    stats["total_completion_tokens"] = sum(x.completion_tokens for x in records)
    stats["total_cost_usd"] = total_cost(x.cost_usd for x in records)
    stats["replayed_calls"] = sum(x.replayed_calls for x in records)
    return stats


def make_record(it: int, attempt: Attempt, verdict: Verdict, recommendation: Recommendation | None, *,
                is_best: bool, llm_s: float, verify_s: float, analysis_s: float, wall_s: float) -> IterationRecord:
    """One iteration's record, its cost including the analysis agent's call that ``recommendation`` carries."""
    resp = attempt.response
    record = IterationRecord(
        iteration=it, phase=attempt.phase, state=verdict.state.value, correct=verdict.correct,
        correct_kernelbench=verdict.correct_under("kernelbench"), message=verdict.message, speedup_eager=verdict.speedup_eager,
        speedup_compile=verdict.speedup_compile,
        runtime_ms=verdict.runtime.median_ms if verdict.runtime else None,
        speed_of_light=verdict.speed_of_light, kernel_share=verdict.kernel_share,
        problem_flags=list(verdict.problem_flags),
        llm_s=llm_s, verify_s=verify_s, analysis_s=analysis_s,
        wall_s=wall_s, cached_reply=bool(resp and resp.cached), is_best=is_best,
        recommendation=recommendation.text() if recommendation else None)
    if resp is not None:
        _count_call(record, resp)
    if recommendation is not None and recommendation.usage is not None:
        _count_call(record, recommendation.usage)  # the analysis agent's call
    return record


def _count_call(record: IterationRecord, call: Any) -> None:
    """Add one model call (an `LLMResponse`, or a recommendation's `CallUsage`) to the record: its tokens
    if it was made, or one replayed call if the cache or a replay answered it; its cost (a replay's is 0)."""
    if call.cached:
        record.replayed_calls += 1
    else:
        record.prompt_tokens += call.prompt_tokens or 0
        record.completion_tokens += call.completion_tokens or 0
    if call.cost_usd is not None:
        record.cost_usd = (record.cost_usd or 0.0) + call.cost_usd
