"""Static checks on a candidate's source, before anything runs.

Each rule has a name; a finding names its rule, and a ``deny`` finding turns the verdict into
``cheat_detected`` with that rule. Rules can be switched off per backend or per run
(``StaticConfig.disabled``), and a backend may allow patterns a rule would otherwise flag.
"""

from __future__ import annotations

import ast
import re

from ..backends import Backend
from ..candidate import never_run
from ..problems import Problem
from . import static_bypass, static_rules, static_surroundings  # noqa: F401 - register the rules
from .config import StaticConfig  # noqa: F401 - its home is config.py; importable here as before
from .findings import RULES, Finding


def check(source: str, backend: Backend, problem: Problem | None = None,
          config: StaticConfig | None = None, precision: str = "fp32") -> list[Finding]:
    """All findings for a candidate (a Python syntax error is left to the build, which reports it). Below
    fp32 (``verify.precision``) reduced-precision types and TF32 are what is asked for, not a downgrade."""
    config = config or StaticConfig()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    findings: list[Finding] = []
    disabled = set(config.disabled) | set(backend.static_disabled)
    if not config.require_kernel:
        disabled |= {"no_kernel", "kernel_not_called", "forbidden_op"}
    if precision != "fp32":
        disabled.add("precision_downgrade")
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
    dead = _never_run(tree)
    kept = []
    for f in findings:
        where = lines[f.line - 1] if f.line and 0 < f.line <= len(lines) else f.message
        if any(a.search(where) for a in allow):
            continue
        if f.rule in config.warn_only:
            f.severity = "warn"
        if f.line in dead and f.severity == "deny":
            f.severity = "warn"
            f.message += ' (under `if __name__ == "__main__":`, which no harness enters: not held against it)'
        kept.append(f)
    return kept


def _never_run(tree: ast.Module) -> set[int]:
    """The lines of the statements no harness runs (`kforge.candidate.never_run`: a ``__main__`` self-test)."""
    return {line for stmt in never_run(tree) for line in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)}
