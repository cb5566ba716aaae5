"""Which class ``ModelNew`` names in a candidate's source, for the static rules that start from its methods.

A program binds ``ModelNew`` however Python allows (`kforge.candidate.module_bindings`): ``class ModelNew``, an
alias of a class under another name (``ModelNew = FusedRelu``), a subclass that adds nothing, a factory that
returns a class (``ModelNew = make_model()``, one defined inside the factory included), a conditional
(``ModelNew = A if FAST else B``), ``functools.partial(Cls, ...)``, a pick from a dict, or an assignment in a
function that declares ``global ModelNew``. `model_classes` follows the binding to every class it may name;
`model_methods` finds a method on them as Python would, through their bases defined in the same program. What the
source does not say (an import, a class made by ``type()``) resolves to nothing, and the rules that need the class then say nothing: the run measures the same questions.
"""

from __future__ import annotations

import ast

from ..candidate import MODEL_NAME, global_bindings, module_bindings, module_level

_DEPTH = 8
"""How many aliases and factories deep a binding is followed (a cycle ends there too)."""


class _Scope:
    """Names bound at module level: a class, a function, or assigned expressions."""

    def __init__(self, body: list[ast.stmt]):
        self.defs: dict[str, list[ast.AST]] = {}
        for node in module_level(body):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.defs.setdefault(t.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
                self.defs.setdefault(node.target.id, []).append(node.value)


def _returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    """The values a function returns (not those of functions nested in it)."""
    out, todo = [], list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            out.append(node.value)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return out


def _classes(expr: ast.AST, scopes: list[_Scope], depth: int) -> list[ast.ClassDef]:
    """The classes an expression may evaluate to, looked up innermost scope first."""
    if depth > _DEPTH:
        return []
    if isinstance(expr, ast.ClassDef):
        return [expr]
    if isinstance(expr, (ast.FunctionDef, ast.AsyncFunctionDef)):  # ModelNew = a factory (called as the model)
        return _from_function(expr, scopes, depth)
    if isinstance(expr, ast.Name):
        for scope in scopes:
            if expr.id in scope.defs:
                return [c for d in scope.defs[expr.id] for c in _classes(d, scopes, depth + 1)]
        return []
    if isinstance(expr, ast.IfExp):
        return _classes(expr.body, scopes, depth + 1) + _classes(expr.orelse, scopes, depth + 1)
    if isinstance(expr, ast.BoolOp):
        return [c for v in expr.values for c in _classes(v, scopes, depth + 1)]
    if isinstance(expr, ast.Subscript):  # {"fast": A, "safe": B}[mode]
        return _classes(expr.value, scopes, depth + 1)
    if isinstance(expr, ast.Dict):
        return [c for v in expr.values for c in _classes(v, scopes, depth + 1)]
    if isinstance(expr, (ast.Tuple, ast.List)):
        return [c for v in expr.elts for c in _classes(v, scopes, depth + 1)]
    if isinstance(expr, ast.Call):
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "partial" and expr.args:  # functools.partial(Cls, ...)
            return _classes(expr.args[0], scopes, depth + 1)
        out = []  # a factory's call gives what it returns; a class's, an instance with the class's methods
        for t in _classes_or_functions(func, scopes, depth + 1):
            out += [t] if isinstance(t, ast.ClassDef) else _from_function(t, scopes, depth + 1)
        return out
    return []


def _classes_or_functions(expr: ast.AST, scopes: list[_Scope], depth: int) -> list[ast.AST]:
    """What a called name is: functions (factories) and classes, as defined in the program."""
    if depth > _DEPTH or not isinstance(expr, ast.Name):
        return []
    for scope in scopes:
        if expr.id in scope.defs:
            out = []
            for d in scope.defs[expr.id]:
                if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    out.append(d)
                else:
                    out += _classes_or_functions(d, scopes, depth + 1)
            return out
    return []


def _from_function(fn: ast.FunctionDef | ast.AsyncFunctionDef, scopes: list[_Scope], depth: int) -> list[ast.ClassDef]:
    """The classes a factory returns, its own nested classes and functions looked up first."""
    inner = [_Scope(fn.body)] + scopes
    return [c for r in _returns(fn) for c in _classes(r, inner, depth + 1)]


def model_classes(tree: ast.Module, name: str = MODEL_NAME) -> list[ast.ClassDef]:
    """Every class the program's module-level bindings of ``name`` may name (empty: none the source defines)."""
    scopes = [_Scope(tree.body)]
    inside = {id(node): fn for fn, node in global_bindings(tree, name)}  # a function's `global ModelNew`
    found: list[ast.ClassDef] = []
    for node in module_bindings(tree, name):
        if isinstance(node, ast.ClassDef):
            values: list[ast.AST] = [node]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            values = [node]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            values = [node.value]
        else:  # an import, a loop or with target: nothing the source says
            values = []
        fn = inside.get(id(node))
        for v in values:
            for c in _classes(v, [_Scope(fn.body), *scopes] if fn is not None else scopes, 0):
                if all(c is not f for f in found):
                    found.append(c)
    return found


def model_methods(tree: ast.Module, method: str, name: str = MODEL_NAME) -> list[ast.FunctionDef]:
    """``method`` as Python finds it on each class ``name`` may name: the class's own, else its first base's (in
    order, depth first, as far as the bases are classes of the program)."""
    scopes = [_Scope(tree.body)]
    out: list[ast.FunctionDef] = []

    def find(cls: ast.ClassDef, depth: int) -> ast.FunctionDef | None:
        own = next((f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and f.name == method), None)
        if own is not None or depth > _DEPTH:
            return own
        for base in cls.bases:
            for b in _classes(base, scopes, depth + 1):
                if (got := find(b, depth + 1)) is not None:
                    return got
        return None

    for cls in model_classes(tree, name):
        if (fn := find(cls, 0)) is not None and all(fn is not f for f in out):
            out.append(fn)
    return out
