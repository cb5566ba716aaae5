"""Offline models: ``scripted`` (replays given replies, for tests) and ``oracle`` (hand-written
solutions of the built-in suite). Neither is an LLM, and both say so wherever they show."""

from __future__ import annotations

import threading
import time
from typing import Any

from .base import CallContext, LLMError, LLMResponse, ModelConfig


class ScriptedModel:
    """Returns ``config.replies`` in order, one per call; running out is an error, not a silent repeat."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self._replies = list(config.replies)
        self._lock = threading.Lock()
        self.calls = 0
        self.prompts: list[list[dict[str, Any]]] = []
        """Every message list it was sent (tests read the rendered prompts here)."""

    def check(self) -> None:
        if not self._replies:
            raise LLMError(f"scripted model {self.config.name!r} has no replies (set model.replies)")

    def complete(self, messages: list[dict[str, Any]], context: CallContext | None = None) -> LLMResponse:
        if self.config.latency_s:
            time.sleep(self.config.latency_s)
        with self._lock:
            if self.calls >= len(self._replies):
                raise LLMError(f"scripted model {self.config.name!r} ran out of replies after {self.calls} calls")
            text = self._replies[self.calls]
            self.calls += 1
            self.prompts.append(messages)
        return LLMResponse(text=text, model=self.config.label, prompt_tokens=0, completion_tokens=0, cost_usd=0.0)


class OracleModel:
    """Answers with the hand-written solution of a built-in problem for the requested backend."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self.calls = 0

    def check(self) -> None:
        """Always available: it reads files shipped with kforge."""

    def complete(self, messages: list[dict[str, Any]], context: CallContext | None = None) -> LLMResponse:
        from ..problems import builtin_solution_path
        if self.config.latency_s:
            time.sleep(self.config.latency_s)
        self.calls += 1
        ctx = context or CallContext()
        precision = ctx.precision
        path = builtin_solution_path(ctx.problem, ctx.backend, precision, ctx.backward) if ctx.problem is not None \
            else None
        same = None
        if path is None and ctx.problem is not None:  # e.g. a workload's region: is its Model a built-in one?
            from ..problems.equivalent import builtin_equivalent
            same = builtin_equivalent(ctx.problem.source)
            path = builtin_solution_path(same, ctx.backend, precision, ctx.backward) if same is not None else None
        if path is None:
            note = (f"the oracle (hand-written solutions, not an LLM) has no {'backward ' if ctx.backward else ''}"
                    f"solution for {ctx.problem_key or '?'} on the {ctx.backend or '?'} backend at {precision}")
            return LLMResponse(text=note, model=self.config.label, cost_usd=0.0, note=note)
        why = f" (this problem's Model is {same.key}'s)" if same is not None else ""
        text = (f"Hand-written solution from kforge's built-in suite{why} (oracle, not an LLM).\n\n```python\n"
                + path.read_text().rstrip() + "\n```\n")
        return LLMResponse(text=text, model=self.config.label, cost_usd=0.0)
