"""The seam between the runner and a search: `SearchStrategy` (the chain, beam search) and `Runner`, what a
strategy may use of the `kforge.loop.runner.ProblemLoop` that runs it."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ..agents import GenerationAgent, Reference
from ..problems import Problem
from ..verify import Verifier
from .advice import Advisor
from .config import LoopConfig
from .records import LoopState


class Runner(Protocol):
    """What a strategy gets from the loop that runs it."""

    agent: GenerationAgent
    verifier: Verifier
    advisor: Advisor
    config: LoopConfig
    stop: threading.Event
    """Set by a Ctrl-C: end after the current step, marking the result ``stopped``."""

    def tell(self, event: str, *args: Any) -> None:
        """Tell the observers a `kforge.loop.LoopObserver` event (``iteration_done`` after each record)."""


class SearchStrategy(Protocol):
    """How a problem's iterations are chosen: `kforge.loop.chain.ChainSearch` (single_shot, iterative) or
    `kforge.loop.beam.BeamSearch`.

    ``search`` runs iterations from ``state`` (a fresh one, or where an earlier job was cut off), records
    each in ``state.result`` and tells ``loop.tell("iteration_done", ...)``; it watches ``loop.stop``. What
    it raises goes to the runner, which ends or skips the problem."""

    def search(self, loop: Runner, problem: Problem, reference: Reference | None, state: LoopState) -> None: ...
