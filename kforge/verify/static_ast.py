"""What the static rules read a candidate's Python AST with: import aliases, dotted names, string constants."""

from __future__ import annotations

import ast


def aliases_of(tree: ast.Module) -> dict[str, str]:
    """Local name -> module it stands for (``import torch.nn.functional as F`` gives F -> torch.nn.functional)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``F.relu`` -> ``torch.nn.functional.relu`` (None for non-name chains)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(aliases.get(node.id, node.id))
        return ".".join(reversed(parts))
    return None


def strings(tree: ast.Module) -> list[str]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def functions(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def line_of(node: ast.AST) -> int | None:
    return getattr(node, "lineno", None)


def imports(tree: ast.Module):
    """(node, module name) for every import statement."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name
        elif isinstance(node, ast.ImportFrom):
            yield node, node.module or ""


def literal(node: ast.AST | None):
    """The value of a literal (a string key, say), else None."""
    return node.value if isinstance(node, ast.Constant) else None
