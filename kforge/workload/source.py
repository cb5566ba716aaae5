"""Program text surgery for regions and assembly, all by ``ast`` (nothing here runs the code).

`closure` keeps what one class needs of a program, `rename_top_level` gives a program's own names a
prefix so that several programs share one file, and `strip_entry_points` drops what only a problem file
needs (``get_inputs``, ``get_init_inputs``, ``KFORGE``).
"""

from __future__ import annotations

import ast
import builtins

from ..errors import KforgeError


class SourceError(KforgeError, ValueError):
    """A program cannot be cut or merged as asked; the message names the program and the name."""


_IMPORTS = (ast.Import, ast.ImportFrom)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def bound_names(node: ast.stmt) -> set[str]:
    """Top-level names a statement binds (imports included)."""
    if isinstance(node, _DEFS):
        return {node.name}
    if isinstance(node, _IMPORTS):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    out: set[str] = set()
    for t in targets:
        out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def closure(source: str, root: str, where: str = "program") -> str:
    """The imports of ``source`` and the top-level statements that ``root`` needs, transitively, in order."""
    tree = ast.parse(source)
    binders: dict[str, list[int]] = {}
    for i, node in enumerate(tree.body):
        for name in bound_names(node):
            binders.setdefault(name, []).append(i)
    if root not in binders:
        raise SourceError(f"{where}: no top-level `{root}`")
    keep: set[int] = {i for i, n in enumerate(tree.body) if isinstance(n, _IMPORTS)}
    todo = [root]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for i in binders.get(name, ()):
            if i not in keep:
                keep.add(i)
                todo.extend(used_names(tree.body[i]))
    body = [n for i, n in enumerate(tree.body) if i in keep]
    return ast.unparse(ast.Module(body=body, type_ignores=[]))


def strip_entry_points(source: str) -> str:
    """The program without ``get_inputs``, ``get_init_inputs`` and ``KFORGE`` (a candidate does not define them)."""
    tree = ast.parse(source)
    drop = {"get_inputs", "get_init_inputs", "KFORGE"}
    tree.body = [n for n in tree.body if not (bound_names(n) & drop and not isinstance(n, _IMPORTS))]
    return ast.unparse(tree)


def _param_names(args: ast.arguments) -> set[str]:
    every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    return {a.arg for a in every}


def _scope_stores(body: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """Names a scope binds (not descending into nested functions or classes) and names it declares global."""
    stored: set[str] = set()
    declared: set[str] = set()
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
            todo.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Global):
            declared.update(node.names)
        elif isinstance(node, _IMPORTS):
            stored |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stored.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return stored, declared


class _Renamer(ast.NodeVisitor):
    """Renames module-level names where they mean the module-level binding (Python's scoping rules:
    a function's own parameters and locals shadow them, a class body's names are attributes)."""

    def __init__(self, mapping: dict[str, str]):
        self.module = mapping
        self.scope = mapping

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.scope:
            node.id = self.scope[node.id]

    def visit_Global(self, node: ast.Global) -> None:
        node.names = [self.module.get(n, n) for n in node.names]

    def _in_scope(self, mapping: dict[str, str], nodes: list[ast.AST]) -> None:
        outer, self.scope = self.scope, mapping
        for n in nodes:
            self.visit(n)
        self.scope = outer

    def _function(self, node) -> None:
        if node.name in self.scope:
            node.name = self.scope[node.name]
        for n in node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(n)
        self._body(node, self.scope)

    def _body(self, node, enclosing: dict[str, str]) -> None:
        """A function's body: its parameters and locals shadow the enclosing names, its globals do not."""
        stored, declared = _scope_stores(node.body)
        local = (_param_names(node.args) | stored) - declared
        mapping = {k: v for k, v in enclosing.items() if k not in local}
        mapping.update({k: self.module[k] for k in declared if k in self.module})
        self._in_scope(mapping, node.body)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for n in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(n)
        local = _param_names(node.args)
        self._in_scope({k: v for k, v in self.scope.items() if k not in local}, [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name in self.scope:
            node.name = self.scope[node.name]
        for n in node.decorator_list + node.bases + node.keywords:
            self.visit(n)
        stored, _ = _scope_stores(node.body)
        # The class body's own assignments are attributes (kept); its methods see the enclosing scope.
        body_scope = {k: v for k, v in self.scope.items() if k not in stored}
        enclosing = self.scope
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in stmt.decorator_list + stmt.args.defaults + [d for d in stmt.args.kw_defaults if d]:
                    self._in_scope(body_scope, [n])
                self._body(stmt, enclosing)
            else:
                self._in_scope(body_scope, [stmt])


def module_names(source: str) -> set[str]:
    """Names a program binds at module level (also inside top-level ``if``/``try``/``with``), imports excluded."""
    tree = ast.parse(source)
    stored, _ = _scope_stores(tree.body)
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, _IMPORTS):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return stored - imported


def rename(source: str, mapping: dict[str, str]) -> str:
    """``source`` with module-level names renamed by ``mapping`` wherever they refer to those bindings."""
    tree = ast.parse(source)
    _Renamer(mapping).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


def import_bindings(source: str) -> dict[str, str]:
    """alias -> the module or attribute it names (``nn`` -> ``torch.nn``), to find two programs binding one alias to
    different things.

    Spellings of one binding agree: ``import torch.nn.modules.linear`` binds ``torch`` to ``torch``, as ``import
    torch`` does, and ``from torch import nn`` names ``torch.nn`` as ``import torch.nn as nn`` does."""
    out: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = "." * node.level + ".".join(filter(None, [node.module, a.name]))
    return out


def rename_top_level(source: str, prefix: str, keep: frozenset[str] = frozenset()) -> tuple[str, dict[str, str]]:
    """Prefix every name the program binds at module level (imports aside), where it is used as that binding.

    Imports keep their names (so the verifier's static rules still read ``load_inline`` as itself).
    """
    mapping = {n: prefix + n for n in module_names(source) - keep - set(dir(builtins))}
    return rename(source, mapping), mapping
