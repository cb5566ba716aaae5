"""What an optimisation pass asks before it writes: the `Advisor` protocol (`kforge.agents.ProfilingAdvisor`
implements it: profile, digest, analyse) and `GenericAdvisor`, the advice when nothing profiles."""

from __future__ import annotations

from typing import Protocol

from ..agents import Recommendation
from ..agents.analysis import GENERIC_RECOMMENDATION, generic_directions
from ..problems import Problem
from ..verify import Verdict


class Advisor(Protocol):
    """Profiles a correct kernel and recommends what to change (`kforge.agents.analysis.ProfilingAdvisor`)."""

    model_calls: int
    """Model calls one `recommend` or `recommend_many` costs (beam search budgets them)."""

    def recommend(self, problem: Problem, code: str, verdict: Verdict, iteration: int = 0) -> Recommendation:
        """One recommendation (the iterative chain)."""

    def recommend_many(self, problem: Problem, code: str, verdict: Verdict, k: int,
                       iteration: int = 0) -> list[Recommendation]:
        """Up to ``k`` recommendations of distinct classes (`Recommendation.category`; beam search)."""


class GenericAdvisor:
    """No profiling: the same generic request every round (beam search: distinct generic directions)."""

    model_calls = 0

    def recommend(self, problem: Problem, code: str, verdict: Verdict, iteration: int = 0) -> Recommendation:
        return Recommendation(action=GENERIC_RECOMMENDATION)

    def recommend_many(self, problem: Problem, code: str, verdict: Verdict, k: int,
                       iteration: int = 0) -> list[Recommendation]:
        return generic_directions(k)
