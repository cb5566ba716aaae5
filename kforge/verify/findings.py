"""What a static rule returns (`Finding`) and the table of rules (`RULES`, filled by `rule`).

A module of its own: `kforge.verify.static` imports the rules to run them, and the rules
(`kforge.verify.static_rules`) register here, so neither imports the other back.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ..backends import Backend
from ..problems import Problem


@dataclass
class Finding:
    """One static-check result."""

    rule: str
    message: str
    line: int | None = None
    severity: str = "deny"
    """``deny`` (the candidate is rejected) or ``warn`` (reported only)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


RuleFn = Callable[[ast.Module, str, Backend, Problem | None], list[Finding]]
RULES: dict[str, RuleFn] = {}


def rule(name: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES[name] = fn
        return fn
    return register
