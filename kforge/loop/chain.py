"""The iterative chain (``loop=single_shot``, ``loop=iterative``), a `kforge.loop.runner.SearchStrategy`:
a functional pass until correct, then optimisation passes.

Per problem: a single-shot generation; then, in ``iterative`` mode, each later iteration either fixes
the latest failure from the verifier's evidence (functional pass) or, once a correct kernel exists,
asks the advisor for one recommendation and the generation agent for a faster program (optimisation
pass). A failed optimisation gets ``max_fixes_in_optimisation`` fix attempts before the loop returns
to optimising the best kernel. The best correct kernel is kept.

Iterations are numbered from 0 (``IterationRecord.iteration``, MLflow's step, ``iter_NNN/``); a job cut
off earlier continues from the `LoopState` it was left in.
"""

from __future__ import annotations

import time

from ..agents import Attempt, Recommendation, Reference
from ..problems import Problem
from .records import LoopState, Step, make_record
from .strategy import Runner


class ChainSearch:
    """One kernel per iteration, each derived from the one before (or from the best)."""

    def search(self, loop: Runner, problem: Problem, reference: Reference | None, state: LoopState) -> None:
        """Iterations ``state.next_iteration``.. of the budget, updating ``state`` after each."""
        cfg, result = loop.config, state.result
        fixes_in_opt = 0
        for it in range(state.next_iteration, cfg.budget):
            if loop.stop.is_set():
                result.stopped = True
                return
            t0 = time.monotonic()
            step = self._write(loop, problem, reference, state, it, fixes_in_opt)
            if step is None:
                return  # verified without timing (verify.skip_timing): no speed to optimise against
            attempt, recommendation, fixes_in_opt = step
            analysis_s = recommendation.analysis_s if recommendation else 0.0
            llm_s = time.monotonic() - t0 - analysis_s
            if loop.stop.is_set():  # stopped during the model call: not verified, so not recorded; a rerun replays it
                result.stopped = True
                return
            v0 = time.monotonic()
            verdict = loop.verifier.verify(problem, attempt.candidate, loop.agent.backend)
            verify_s = time.monotonic() - v0
            is_best = result.offer(attempt.candidate.source, verdict, it, cfg.speedup_vs)
            record = make_record(it, attempt, verdict, recommendation, is_best=is_best, llm_s=llm_s,
                                 verify_s=verify_s, analysis_s=analysis_s, wall_s=time.monotonic() - t0)
            result.records.append(record)
            loop.tell("iteration_done", problem, Step(record, attempt, verdict, recommendation, result.outcome))
            state.next_iteration, state.last_code, state.last_verdict = it + 1, attempt.candidate.source, verdict
            if result.reached(cfg.target_speedup, cfg.speedup_vs):
                return

    @staticmethod
    def _write(loop: Runner, problem: Problem, reference: Reference | None, state: LoopState, it: int,
               fixes_in_opt: int) -> tuple[Attempt, Recommendation | None, int] | None:
        """Iteration ``it``'s program: a single shot, a fix or an optimisation (with the advice it followed),
        and the fixes spent on the current optimisation; None when there is nothing to optimise against."""
        cfg, result = loop.config, state.result
        last_verdict = state.last_verdict
        if it == 0 or (last_verdict is None and result.best_verdict is None):
            return loop.agent.single_shot(problem, reference, iteration=it), None, fixes_in_opt
        if last_verdict is not None and not last_verdict.correct and (
                result.best_verdict is None or fixes_in_opt < cfg.max_fixes_in_optimisation):
            spent = fixes_in_opt + (result.best_verdict is not None)  # fixes of an optimisation are limited
            return loop.agent.fix(problem, state.last_code, last_verdict, iteration=it), None, spent
        if result.best_verdict is not None and result.best_verdict.runtime is None:
            return None
        a0 = time.monotonic()
        recommendation = loop.advisor.recommend(problem, result.best_code, result.best_verdict, iteration=it)
        recommendation.analysis_s = time.monotonic() - a0
        attempt = loop.agent.optimise(problem, result.best_code, result.best_verdict, recommendation.text(),
                                      iteration=it)
        return attempt, recommendation, 0
