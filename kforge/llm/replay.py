"""Replaying a sweep's model calls by their place in the sweep, so a rerun calls no model.

The response cache (`ResponseCache`, keyed by model, messages and parameters) misses whenever a prompt
carries something measured afresh: the optimise prompt's timings, a fix prompt's mismatch statistics
(each verification draws fresh inputs). `ReplayingModel` keys every call of the refinement loop by
its place instead: (the job's configuration hash, the model string, the problem, the phase —
``single_shot``, ``fix``, ``optimise`` or ``analysis`` —, the iteration, and which call of that kind
it is). A job with the same configuration (a rerun with ``resume=false``, or a resumed job continuing
a cut-off problem) gets the reply recorded at that place, whatever numbers its prompt now carries;
the verifier still checks and times the replayed kernel afresh. A place the earlier job never
reached (the rerun's loop took another path, e.g. a kernel judged differently now means a fix
where it optimised) is a new call. ``model.cache=false`` switches replay off with the cache.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from .base import LLM, CallContext, LLMResponse
from .cache import ResponseCache


class ReplayingModel:
    """Wraps a model: replays a call recorded at the same place of a job with the same configuration."""

    def __init__(self, inner: LLM, cache: ResponseCache, scope: str):
        self.inner, self.cache, self.scope = inner, cache, scope
        self.config = inner.config
        self.replayed = 0
        """Calls answered by replay."""
        self._seen: dict[tuple[str, str, int], int] = {}
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        """Calls that reached the model (replays and cache hits excluded)."""
        return getattr(self.inner, "calls", 0)

    def check(self) -> None:
        self.inner.check()

    def key(self, ctx: CallContext, n: int) -> str:
        place = {"replay": 1, "scope": self.scope, "model": self.config.model or self.config.name, "problem": ctx.problem_key,
                 "phase": ctx.phase, "iteration": ctx.iteration, "n": n}
        return hashlib.sha256(json.dumps(place, sort_keys=True).encode()).hexdigest()

    def complete(self, messages: list[dict[str, Any]], context: CallContext | None = None) -> LLMResponse:
        if context is None or not context.problem_key:  # not a loop call: it has no place to replay from
            return self.inner.complete(messages, context)
        where = (context.problem_key, context.phase, context.iteration)
        with self._lock:
            n = self._seen.get(where, 0)
            self._seen[where] = n + 1
        key = self.key(context, n)
        hit = self.cache.get(key)
        if hit is not None:
            with self._lock:
                self.replayed += 1
            return hit
        response = self.inner.complete(messages, context)
        if not response.note:
            self.cache.put(key, response)
        return response


def replaying(llm: LLM, scope: str) -> LLM:
    """``llm`` replaying by place where it has a response cache (real models with ``cache`` on), else itself."""
    cache = getattr(llm, "cache", None)
    return ReplayingModel(llm, cache, scope) if isinstance(cache, ResponseCache) else llm
