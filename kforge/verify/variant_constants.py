"""How a shape variant's constants reach the candidate, which runs in the variant's namespace (`shown_and_followed`):
the test configuration it was shown stays as shown; what the problem's own model reads follows the variant."""

from __future__ import annotations

import ast

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _own_nodes(nodes: list[ast.AST]):
    """Every node under ``nodes`` outside the scopes nested in them; each nested scope (a function, lambda or
    class) is yielded itself, not entered: what it reads depends on what it binds."""
    todo = list(nodes)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    a = fn.args
    return {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None}


def _free_reads(scope: ast.AST, bound: frozenset[str]) -> set[str]:
    """The names ``scope`` (a function, lambda or class) reads that neither it nor a function around it binds:
    a parameter or local named like a module constant (``def __init__(self, in_features)``, as every KernelBench
    level-2 model writes) is not a read of the constant."""
    outer: list[ast.AST] = []  # evaluated where the scope is defined: defaults, decorators, bases
    if isinstance(scope, ast.ClassDef):
        outer = [*scope.decorator_list, *scope.bases, *scope.keywords]
    else:
        a = scope.args
        outer = [*a.defaults, *(d for d in a.kw_defaults if d is not None)]
        outer += getattr(scope, "decorator_list", [])
    body = scope.body if isinstance(scope.body, list) else [scope.body]
    nodes = list(_own_nodes(body))
    declared = {n for node in nodes if isinstance(node, ast.Global) for n in node.names}
    local = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    local |= {n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    local |= {a.asname or a.name.split(".")[0] for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))
              for a in n.names}
    if not isinstance(scope, ast.ClassDef):
        local |= _params(scope)
    local -= declared
    reads = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - local - bound
    reads |= {n.id for node in outer for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    inner = bound if isinstance(scope, ast.ClassDef) else bound | local  # a class body's names are not its methods'
    for nested in nodes:
        if nested is not scope and isinstance(nested, _SCOPES):
            reads |= _free_reads(nested, frozenset(inner))
    return reads - bound


INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")


def _scopes(tree: ast.Module) -> dict[str, ast.AST]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _reached(roots: set[str], reads: dict[str, set[str]]) -> set[str]:
    """``roots`` and every top-level function or class they read, and those read, on."""
    out, todo = set(roots), list(roots)
    while todo:
        for name in reads.get(todo.pop(), ()):
            if name in reads and name not in out:
                out.add(name)
                todo.append(name)
    return out


def input_helpers(tree: ast.Module) -> set[str]:
    """``get_inputs``, ``get_init_inputs`` and the top-level functions only they call (``_make_input()``, which
    draws ``torch.randn(batch_size, dim)`` for ``get_inputs``): the test configuration, not the problem's model."""
    scopes = _scopes(tree)
    reads = {name: _free_reads(node, frozenset()) for name, node in scopes.items()}
    inputs = _reached({f for f in INPUT_FUNCTIONS if f in scopes}, reads)
    top = {n.id for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
           for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    model = _reached((set(scopes) - inputs) | (top & set(scopes)), reads)
    return (inputs - model) | {f for f in INPUT_FUNCTIONS if f in scopes}


def _assignments(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level name -> the names its assignment reads."""
    defs: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        defs.setdefault(n.id, set()).update(used)
    return defs


def model_reads(source: str) -> set[str]:
    """The module-level names the problem's own code reads when it runs: in its functions and classes other than
    ``get_inputs``, ``get_init_inputs`` and the helpers only they call (`input_helpers`; where a parameter or local
    of the same name does not shadow them, `_free_reads`), and, through them, the module-level assignments those
    names come from (``input_shape = (batch_size, dim)`` read by the model makes ``batch_size`` and ``dim`` its
    too)."""
    tree = ast.parse(source)
    test = input_helpers(tree)
    reads: set[str] = set()
    for name, node in _scopes(tree).items():
        if name not in test:
            reads |= _free_reads(node, frozenset())
    defs = _assignments(tree)
    todo = list(reads)
    while todo:
        for name in defs.get(todo.pop(), ()):
            if name not in reads:
                reads.add(name)
                todo.append(name)
    return reads


def derived_from(source: str, names: set[str]) -> set[str]:
    """The module-level names whose assignments read one of ``names``, directly or through another such name
    (``scale = dim ** -0.5`` of ``dim``)."""
    defs = _assignments(ast.parse(source))
    out: set[str] = set()
    grew = True
    while grew:
        new = {k for k, used in defs.items() if k not in out and k not in names and used & (names | out)}
        out |= new
        grew = bool(new)
    return out


def shown_and_followed(overrides: dict, problem: dict, reads: set[str], derived: set[str] = frozenset()) \
        -> tuple[dict, dict]:
    """How a variant's constants reach the candidate, which runs in the variant's namespace: (the constants set back
    to the values it was shown, the overrides its restatements give way to).

    A constant only ``get_inputs`` and ``get_init_inputs`` read is test configuration: the candidate sees the
    problem's value, at import and after, so one that sizes its output by ``batch_size`` rather than by its input
    has baked the size in and fails at the variant, as it would on any other input. A constant the problem's own
    model reads (level 3's VanillaRNN sizes its hidden state by ``batch_size`` in ``__init__``) is part of the
    problem, and follows the variant: where the candidate restates it with the problem's value (KernelBench
    generations repeat the whole file, ``batch_size = 8`` and all), the variant's value counts
    (`restated_take_the_variant`); judged against itself, the VanillaRNN otherwise failed its first variant.
    ``derived``: the constants computed from the overridden ones (`derived_from`: ``ffn = 4 * dim``), shown as the
    problem has them too where the model does not read them, or a kernel that bakes in ``ffn`` is rebuilt at each
    variant's value."""
    shown = {k: problem[k] for k in [*overrides, *sorted(derived)] if k in problem and k not in reads}
    return shown, {k: v for k, v in overrides.items() if k in reads}


def restated_take_the_variant(namespace: dict, overrides: dict, problem: dict) -> None:
    """Where the candidate restated a constant of ``overrides`` with the problem's own value, the variant's value
    counts (`shown_and_followed`). A size of the candidate's own stays its own, and whatever it computed from the
    constant on import (a size written into its kernel's source) keeps the value it computed."""
    for name, value in overrides.items():
        if name in namespace and name in problem and type(namespace[name]) is type(problem[name]) \
                and namespace[name] == problem[name]:
            namespace[name] = value
