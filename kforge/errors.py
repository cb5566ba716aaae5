"""kforge's exception hierarchy: every error kforge raises on purpose derives from `KforgeError`.

A caller (a script, a notebook, the CLI) can catch ``KforgeError`` to tell "kforge refused or could not
do this, and says why" from a bug. The concrete classes stay importable where they are raised (e.g.
``kforge.llm.LLMError``, ``kforge.sandbox.pool.WorkerLost``); they keep their old builtin bases too,
so code that caught ``ValueError`` or ``RuntimeError`` still does. This module imports nothing: the
verifier's worker processes load it.
"""

from __future__ import annotations


class KforgeError(Exception):
    """Base of kforge's own errors; the message is meant for the user."""


class ConfigError(KforgeError, ValueError):
    """The configuration cannot work; the message says which key and what to set."""


__all__ = ["ConfigError", "KforgeError"]
