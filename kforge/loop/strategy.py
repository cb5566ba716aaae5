"""The seam between the runner and a search: `SearchStrategy` (the chain, beam search); `Runner`, what a
strategy may use of the `kforge.loop.runner.ProblemLoop` that runs it; and `LoopVerifier`, what the loop
uses of a verifier, so the loop's tests can hand it an in-process one instead of worker pools."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ..agents import GenerationAgent, Reference
from ..backends import Backend
from ..candidate import Candidate
from ..problems import Problem
from ..verify import Verdict
from .advice import Advisor
from .config import LoopConfig
from .records import LoopState


class SlotPool(Protocol):
    """What the loop uses of a verifier's worker pool (`kforge.sandbox.pool.WorkerPool` is one)."""

    counters: dict[str, int]
    """Requests served, by kind; ``run``: candidates run (a job's ``verifications``)."""

    def slot_count(self, kind: str) -> int:
        """Slots of ``kind``: how many candidates run at once (beam search sizes its threads by it)."""


class LoopVerifier(Protocol):
    """What the loop uses of a verifier (`kforge.verify.Verifier` is one)."""

    @property
    def pool(self) -> SlotPool: ...

    def verify(self, problem: Problem, candidate: Candidate, backend: Backend) -> Verdict:
        """The candidate's `Verdict`; safe from several threads at once. A problem that itself fails raises
        a `kforge.problems.ProblemError`."""

    def device_kinds(self, backend: Backend) -> list[str]:
        """The pool's slot kinds that run ``backend``'s candidates."""


class Runner(Protocol):
    """What a strategy gets from the loop that runs it."""

    agent: GenerationAgent
    verifier: LoopVerifier
    advisor: Advisor
    config: LoopConfig
    stop: threading.Event
    """Set by a Ctrl-C: end after the current step (`kforge.loop.step.stopping` marks the result ``stopped``)."""

    def tell(self, event: str, *args: Any) -> None:
        """Tell the observers a `kforge.loop.LoopObserver` event (``iteration_done`` after each record)."""


class SearchStrategy(Protocol):
    """How a problem's iterations are chosen: `kforge.loop.chain.ChainSearch` (single_shot, iterative) or
    `kforge.loop.beam.BeamSearch`.

    ``search`` runs iterations from ``state`` (a fresh one, or where an earlier job was cut off). It only
    chooses each iteration's number and what the model is asked to write; `kforge.loop.step` writes,
    verifies, records it in ``state.result`` and tells ``iteration_done``. It asks `kforge.loop.step.stopping`
    before each step and returns once it says stop. What it raises goes to the runner, which ends or skips
    the problem."""

    def search(self, loop: Runner, problem: Problem, reference: Reference | None, state: LoopState) -> None: ...
