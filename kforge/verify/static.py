"""Static checks on a candidate's source, before anything runs.

Each rule has a name; a finding names its rule, and a ``deny`` finding turns the verdict into
``cheat_detected`` with that rule. Rules can be switched off per backend or per run
(``StaticConfig.disabled``), and a backend may allow patterns a rule would otherwise flag.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field
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


@dataclass
class StaticConfig:
    """Which static rules run."""

    require_kernel: bool = True
    """The candidate must contain a kernel in its backend's language and call it from forward."""
    disabled: list[str] = field(default_factory=list)
    """Rule names to skip."""


RuleFn = Callable[[ast.Module, str, Backend, Problem | None], list[Finding]]
RULES: dict[str, RuleFn] = {}


def rule(name: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES[name] = fn
        return fn
    return register


@rule("no_kernel")
def _no_kernel(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    if backend.has_kernel(source):
        return []
    return [Finding("no_kernel", f"no kernel found: the {backend.name} backend needs {backend.kernel_hint}; "
                                 "a program that only calls PyTorch has not written a kernel")]


def check(source: str, backend: Backend, problem: Problem | None = None,
          config: StaticConfig | None = None) -> list[Finding]:
    """All findings for a candidate (a Python syntax error is left to the build, which reports it)."""
    config = config or StaticConfig()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    findings: list[Finding] = []
    for name, fn in RULES.items():
        if name in config.disabled or (name == "no_kernel" and not config.require_kernel):
            continue
        findings.extend(fn(tree, source, backend, problem))
    return findings
