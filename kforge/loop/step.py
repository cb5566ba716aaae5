"""One iteration's step, the same for every search strategy: the model writes a kernel, the verifier judges
it, the result keeps it if it is the best so far, and the observers hear of it (``iteration_done``). A
strategy only chooses what comes next (a single shot, a fix, an optimisation after advice) under which
iteration number; this module runs it.

`run_step` runs a whole step in the caller's thread (the chain). Beam search splits it: `write_and_verify`
for each node of a wave in a pool thread, then `record` for each in id order from the problem's thread, so
observers hear of the nodes in a fixed order. `stopping` is the one place a result is marked ``stopped``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..agents import Attempt, Recommendation
from ..problems import Problem
from ..verify import Verdict
from .records import IterationRecord, LoopState, ProblemResult, Step, make_record
from .strategy import Runner


@dataclass
class Draft:
    """One iteration on its way through the step: what a strategy chose, then what the model wrote and what
    the verifier said of it."""

    iteration: int
    """Its id (MLflow's step, ``iter_NNN/``), handed out by the strategy."""
    parent: int | None = None
    """Beam search: the node it derives from (the record's ``parent``); None in the chain."""
    depth: int | None = None
    """Beam search: the round that made it."""
    direction: str | None = None
    """Beam search: its branch's recommendation class."""
    recommendation: Recommendation | None = None
    """The advice an optimisation follows (its analysis time and cost go on this record)."""
    attempt: Attempt | None = None
    verdict: Verdict | None = None
    """None until verified; stays None when the loop was stopped during its model call."""
    llm_s: float = 0.0
    verify_s: float = 0.0
    restored: IterationRecord | None = None
    """Resumed: the record an earlier run of the job logged for this iteration (nothing is run or told again)."""

    @property
    def code(self) -> str | None:
        return self.attempt.candidate.source if self.attempt else None

    @property
    def analysis_s(self) -> float:
        return self.recommendation.analysis_s if self.recommendation else 0.0


def stopping(loop: Runner, result: ProblemResult) -> bool:
    """Whether the loop's stop event is set (a Ctrl-C, SIGTERM); if it is, ``result`` is cut off (``stopped``:
    a rerun continues it). Strategies ask before each step; the runner asks when a search raised."""
    if loop.stop.is_set():
        result.stopped = True
        return True
    return False


def write_and_verify(loop: Runner, problem: Problem, draft: Draft, write: Callable[[int], Attempt]) -> Draft:
    """The draft's model call (``write(iteration)``) and its verification; safe from several threads at once
    (the verifier and its pool are). Not verified once the loop is stopped: ``verdict`` stays None."""
    t0 = time.monotonic()
    draft.attempt = write(draft.iteration)
    draft.llm_s = time.monotonic() - t0
    if not loop.stop.is_set():
        v0 = time.monotonic()
        draft.verdict = loop.verifier.verify(problem, draft.attempt.candidate, loop.agent.backend)
        draft.verify_s = time.monotonic() - v0
    return draft


def record(loop: Runner, problem: Problem, state: LoopState, draft: Draft) -> IterationRecord | None:
    """Record a written draft in ``state``: offered as the best, its record made (a restored draft keeps the
    one logged earlier, and is not told again), the observers told, and it is the latest kernel. None for a
    draft the stop left unverified: not recorded, the result cut off (a rerun replays its model call)."""
    cfg, result, verdict = loop.config, state.result, draft.verdict
    if verdict is None:
        stopping(loop, result)
        return None
    is_best = result.offer(draft.code, verdict, draft.iteration, cfg.speedup_vs)
    rec = draft.restored
    if rec is not None:
        rec.is_best = is_best
    else:
        rec = make_record(draft.iteration, draft.attempt, verdict, draft.recommendation, is_best=is_best,
                          llm_s=draft.llm_s, verify_s=draft.verify_s, analysis_s=draft.analysis_s,
                          wall_s=draft.llm_s + draft.verify_s + draft.analysis_s)
        rec.parent, rec.depth, rec.direction = draft.parent, draft.depth, draft.direction
    result.records.append(rec)
    if draft.restored is None:
        loop.tell("iteration_done", problem, Step(rec, draft.attempt, verdict, draft.recommendation, result.outcome))
    state.last_code, state.last_verdict = draft.code, verdict
    return rec


def run_step(loop: Runner, problem: Problem, state: LoopState, draft: Draft,
             write: Callable[[int], Attempt]) -> IterationRecord | None:
    """`write_and_verify`, then `record`, in the caller's thread."""
    return record(loop, problem, state, write_and_verify(loop, problem, draft, write))
