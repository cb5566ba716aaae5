"""A problem's best kernel by a rule noise cannot win (`kforge.verify.retime` says why).

Two places: `MeasuredOnce`, the verifier as a problem loop uses it, verifies a kernel met again in the same
problem (the same source) only once: its verdict is reused and its timing is not drawn again, so a lucky draw
of the same kernel cannot become a new best (`ProblemResult.offer` pools each source's timings and ranks by
their median). And `settle`, at the end of the problem, times the finalists (the `FINALISTS` best-ranked
distinct correct kernels) again, interleaved, `kforge.verify.retime.ROUNDS` rounds: the best is the one the
re-timing ranks first, and the problem reports its re-timed median with its interval. A problem with one
correct kernel chose nothing, so it reports that kernel's own timing and interval without timing it again.
"""

from __future__ import annotations

import threading
from typing import Any

from ..candidate import Candidate
from ..problems import Problem
from ..verify import Verdict, Verifier
from ..verify.retime import ROUNDS, retime, timing_only
from .records import ProblemResult

#: How many distinct correct kernels of a problem are re-timed against each other at its end.
FINALISTS = 3


class MeasuredOnce:
    """A verifier that verifies each source once per problem: the same kernel again gets its first verdict.
    Anything else (a call with its own settings, `retime`'s) goes to the verifier; so does every attribute."""

    def __init__(self, verifier: Verifier, stop: threading.Event | None = None):
        self.verifier = verifier
        self._stop = stop or threading.Event()
        """Set by a Ctrl-C: a re-timing ends early."""
        self._seen: dict[tuple[str, str, str, str], Verdict] = {}
        self._lock = threading.Lock()
        self.retimings = 0
        """Runs spent re-timing finalists (`time_again`): no candidate's first verification, so a job's count of
        verifications leaves them out."""

    def verify(self, problem: Problem, candidate: Candidate | str, backend: Any, config: Any = None) -> Verdict:
        if isinstance(candidate, str):
            candidate = Candidate.from_source(candidate)
        if config is not None or candidate.source is None:
            return self.verifier.verify(problem, candidate, backend, config)
        key = (problem.key, problem.source, candidate.hash, str(getattr(backend, "name", backend)))
        with self._lock:
            seen = self._seen.get(key)
        if seen is not None:
            return seen
        verdict = self.verifier.verify(problem, candidate, backend)
        with self._lock:
            self._seen.setdefault(key, verdict)
        return verdict

    def time_again(self, problem: Problem, sources: list[str], backend: Any) -> dict[str, list[Verdict]]:
        """Time these verified kernels of ``problem`` again, interleaved (`kforge.verify.retime.retime`), with
        timing-only settings; each source's timings."""
        config = timing_only(self.verifier.config, ROUNDS)

        def once(source: str) -> Verdict:
            with self._lock:
                self.retimings += 1
            return self.verifier.verify(problem, source, backend, config)
        return retime(once, sources, ROUNDS, stop=self._stop.is_set)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.verifier, name)


def settle(loop: Any, problem: Problem, result: ProblemResult) -> int:
    """Re-time the problem's finalists against each other when several compete, and let the re-timing choose and
    report the best (`ProblemResult.settle`); how many were re-timed (0: one kernel or none, nothing to choose)."""
    vs = loop.config.speedup_vs
    finalists = result.finalists(FINALISTS, vs)
    if len(finalists) < 2 or loop.stop.is_set():
        return 0
    codes = {result.kernels[k][0]: k for k in finalists}
    timed = loop.verifier.time_again(problem, list(codes), loop.agent.backend)
    if loop.stop.is_set():
        return 0  # cut off: the rerun settles it
    result.settle({codes[source]: verdicts for source, verdicts in timed.items()}, vs)
    return len(finalists)
