"""Which built-in problem a program is, by the code of its `Model` class.

A region extracted from a workload (`kforge.workload`) whose `Model` is a built-in problem's `Model`
(the same code, docstrings and annotations aside) computes what that problem computes at any shape its
constructor arguments give, so a solution of the problem, written for any size, solves the region: this
is how the `oracle` answers a built-in workload's regions.
"""

from __future__ import annotations

import ast
import functools

from .problem import Problem
from .suite import BUILTIN_DIR, load_directory


def _strip(node: ast.AST) -> ast.AST:
    """Docstrings and annotations off: they change no computation."""
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            n.body = body[1:] or [ast.Pass()]
        if isinstance(n, ast.arg):
            n.annotation = None
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n.returns = None
    return node


def normalized_class(source: str, name: str = "Model") -> str | None:
    """A class's code without docstrings, annotations and its own name (None: no such class, or no parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            node = _strip(node)
            node.name = "_"
            return ast.dump(node, include_attributes=False)
    return None


@functools.lru_cache(maxsize=1)
def _builtin_models() -> dict[str, Problem]:
    out: dict[str, Problem] = {}
    for p in load_directory(BUILTIN_DIR, origin="builtin"):
        key = normalized_class(p.source)
        if key is not None:
            out.setdefault(key, p)
    return out


def builtin_equivalent(source: str, name: str = "Model") -> Problem | None:
    """The built-in problem whose `Model` is the class ``name`` of ``source``, if one is."""
    key = normalized_class(source, name)
    return _builtin_models().get(key) if key is not None else None
