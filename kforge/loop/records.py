"""What a problem loop records and tells: one iteration's `IterationRecord`, a problem's `ProblemResult`,
the `LoopState` a resumed job continues from, and the `LoopObserver` protocol its observers (MLflow
tracking, the console) implement.

A per-iteration metric is a number field on `IterationRecord`, set in `make_record`: the tracker logs it
under its field name (`kforge.tracking.schema` derives the metric list from this dataclass).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..agents import Attempt, Recommendation, Reference
from ..metrics import speedup_over
from ..problems import Problem
from ..verify import Verdict


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

    @property
    def correct(self) -> bool:
        return self.best_verdict is not None

    def offer(self, code: str | None, verdict: Verdict, iteration: int, vs: str) -> bool:
        """Keep this kernel as the best if it is correct and ranks above the best so far; whether it did."""
        better = verdict.correct and (self.best_verdict is None or
                                      rank_speedup(verdict, vs) > rank_speedup(self.best_verdict, vs))
        if better:
            self.best_code, self.best_verdict, self.best_iteration = code, verdict, iteration
        return better

    def reached(self, target: float | None, vs: str) -> bool:
        """Whether the best kernel meets ``loop.target_speedup`` (None: no target)."""
        return bool(target) and self.best_verdict is not None and rank_speedup(self.best_verdict, vs) >= target

    @property
    def speedup_eager(self) -> float | None:
        return self.best_verdict.speedup_eager if self.best_verdict else None

    @property
    def speedup_compile(self) -> float | None:
        return self.best_verdict.speedup_compile if self.best_verdict else None

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


class LoopObserver(Protocol):
    """What a problem loop tells while it runs (MLflow tracking, the progress lines). Called from the
    loop's thread, in the order the observers were given; an error raised here fails that problem."""

    def problem_started(self, problem: Problem, reference: Reference | None, resume: LoopState | None) -> None:
        """Before the first iteration; ``resume`` is the state a continued run starts from."""

    def iteration_done(self, problem: Problem, step: Step) -> None:
        """After each iteration's verification."""

    def problem_ended(self, problem: Problem, result: ProblemResult) -> None:
        """The problem ended: finished, ``stopped`` (Ctrl-C, SIGTERM) or with an ``error`` of kforge's."""

    def problem_abandoned(self, problem: Problem) -> None:
        """Left without a result (a BaseException other than a kforge error went through the loop)."""


def rank_speedup(verdict: Verdict, vs: str) -> float:
    """What ranks correct kernels and meets ``target_speedup``."""
    return speedup_over(vs, verdict.speedup_eager, verdict.speedup_compile, or_eager=True) or 0.0


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
        prompt_tokens=resp.prompt_tokens if resp else 0, completion_tokens=resp.completion_tokens if resp else 0,
        cost_usd=resp.cost_usd if resp else None, llm_s=llm_s, verify_s=verify_s, analysis_s=analysis_s,
        wall_s=wall_s, cached_reply=bool(resp and resp.cached), is_best=is_best,
        recommendation=recommendation.text() if recommendation else None)
    usage = (recommendation.artifacts.get("usage") or {}) if recommendation else {}
    record.prompt_tokens += usage.get("prompt_tokens") or 0  # the analysis agent's call, if any
    record.completion_tokens += usage.get("completion_tokens") or 0
    if usage.get("cost_usd") is not None:
        record.cost_usd = (record.cost_usd or 0.0) + usage["cost_usd"]
    return record
