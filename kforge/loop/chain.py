"""The iterative chain (``loop=single_shot``, ``loop=iterative``), a `kforge.loop.runner.SearchStrategy`:
a functional pass until correct, then optimisation passes.

Per problem: a single-shot generation; then, in ``iterative`` mode, each later iteration either fixes
the latest failure from the verifier's evidence (functional pass) or, once a correct kernel exists,
asks the advisor for one recommendation and the generation agent for a faster program (optimisation
pass). A failed optimisation gets ``max_fixes_in_optimisation`` fix attempts before the loop returns
to optimising the best kernel. The best correct kernel is kept. The chain only chooses each iteration's
request; `kforge.loop.step.run_step` has it written, verified and recorded.

Iterations are numbered from 0 (``IterationRecord.iteration``, MLflow's step, ``iter_NNN/``); a job cut
off earlier continues from the `LoopState` it was left in.
"""

from __future__ import annotations

import time
from typing import Callable

from ..agents import Attempt, Recommendation, Reference
from ..problems import Problem
from .records import LoopState
from .step import Draft, run_step, stopping
from .strategy import Runner


class ChainSearch:
    """One kernel per iteration, each derived from the one before (or from the best)."""

    def search(self, loop: Runner, problem: Problem, reference: Reference | None, state: LoopState) -> None:
        """Iterations ``state.next_iteration``.. of the budget, updating ``state`` after each."""
        cfg, result = loop.config, state.result
        fixes_in_opt = 0
        for it in range(state.next_iteration, cfg.budget):
            if stopping(loop, result):
                return
            chosen = self._next(loop, problem, reference, state, it, fixes_in_opt)
            if chosen is None:
                return  # verified without timing (verify.skip_timing): no speed to optimise against
            write, recommendation, fixes_in_opt = chosen
            if run_step(loop, problem, state, Draft(it, recommendation=recommendation), write) is None:
                return  # stopped during the model call: not verified, so not recorded; a rerun replays it
            state.next_iteration = it + 1
            if result.reached(cfg.target_speedup, cfg.speedup_vs):
                return

    @staticmethod
    def _next(loop: Runner, problem: Problem, reference: Reference | None, state: LoopState, it: int,
              fixes_in_opt: int) -> tuple[Callable[[int], Attempt], Recommendation | None, int] | None:
        """What iteration ``it`` asks the model for: a single shot, a fix or an optimisation (with the advice it
        follows, asked here), and the fixes spent on the current optimisation; None when there is nothing to
        optimise against."""
        cfg, result, agent = loop.config, state.result, loop.agent
        last_code, last_verdict = state.last_code, state.last_verdict
        if it == 0 or (last_verdict is None and result.best_verdict is None):
            return lambda i: agent.single_shot(problem, reference, iteration=i), None, fixes_in_opt
        if last_verdict is not None and not last_verdict.correct and (
                result.best_verdict is None or fixes_in_opt < cfg.max_fixes_in_optimisation):
            spent = fixes_in_opt + (result.best_verdict is not None)  # fixes of an optimisation are limited
            return lambda i: agent.fix(problem, last_code, last_verdict, iteration=i), None, spent
        best_code, best_verdict = result.best_code, result.best_verdict
        if best_verdict is not None and best_verdict.runtime is None:
            return None
        a0 = time.monotonic()
        recommendation = loop.advisor.recommend(problem, best_code, best_verdict, iteration=it)
        recommendation.analysis_s = time.monotonic() - a0
        advice = recommendation.text()
        return (lambda i: agent.optimise(problem, best_code, best_verdict, advice, iteration=i), recommendation,
                0)
