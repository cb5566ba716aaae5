"""Static checks on a candidate's source, before anything runs.

Each rule has a name; a finding names its rule, and a ``deny`` finding turns the verdict into
``cheat_detected`` with that rule. Rules can be switched off per backend or per run
(``StaticConfig.disabled``), and a backend may allow patterns a rule would otherwise flag.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ..backends import Backend
from ..problems import Problem
from .config import StaticConfig  # noqa: F401 - its home is config.py; importable here as before


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
    disabled = set(config.disabled) | set(backend.static_disabled)
    if not config.require_kernel:
        disabled |= {"no_kernel", "kernel_not_called", "forbidden_op"}
    for name, fn in RULES.items():
        if name not in disabled:
            findings.extend(fn(tree, source, backend, problem))
    for pattern in list(config.deny) + list(backend.static_deny):
        m = re.search(pattern, source, re.MULTILINE)
        if m:
            line = source.count("\n", 0, m.start()) + 1
            findings.append(Finding("deny_pattern", f"matches the deny pattern {pattern!r}: {m.group(0)[:60]!r}", line))
    allow = [re.compile(p) for p in list(config.allow) + list(backend.static_allow)]
    lines = source.splitlines()
    kept = []
    for f in findings:
        where = lines[f.line - 1] if f.line and 0 < f.line <= len(lines) else f.message
        if any(a.search(where) for a in allow):
            continue
        if f.rule in config.warn_only:
            f.severity = "warn"
        kept.append(f)
    return kept


from . import static_rules  # noqa: E402,F401 - registers the rules
