"""A candidate program, and the code-extraction helper that turns a model's reply into one."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+#.\-]*)[^\n]*\n(?P<body>.*?)"
                    r"(?:^[ \t]*(?P=fence)[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
# A binding of ModelNew in text that does not parse (the build reports the syntax error): a class or function of
# that name, an assignment to it, or an import naming it.
_MODELNEW = re.compile(r"^\s*(?:(?:class|def)\s+ModelNew\b|ModelNew\s*(?::[^=\n]*)?=(?!=)"
                       r"|(?:from|import)\b.*\bModelNew\b)", re.MULTILINE)
MODEL_NAME = "ModelNew"
_PY_LANGS = {"", "python", "py", "python3", "python3.10", "py3"}


@dataclass(frozen=True)
class Candidate:
    """Program text proposed for a problem; ``source`` is None when the reply held no usable code."""

    source: str | None
    """The Python program defining ``ModelNew`` (None: generation failure)."""
    reply: str | None = None
    """The model's whole reply, when the candidate came from a model."""
    error: str | None = None
    """Why there is no source, for a generation failure."""

    @property
    def hash(self) -> str:
        return hashlib.sha256((self.source or "").encode()).hexdigest()[:16]

    @classmethod
    def from_source(cls, source: str) -> "Candidate":
        """A program given directly (a .py file); it must still bind ``ModelNew`` (`binds_model_new`)."""
        if not binds_model_new(source or ""):
            return cls(None, reply=source, error=NO_BINDING)
        return cls(source)

    @classmethod
    def from_reply(cls, reply: str | None, complete_only: bool = False) -> "Candidate":
        """Extract the program from a model reply (see `extract_code`)."""
        source, error = extract_code(reply or "", complete_only)
        return cls(source, reply=reply, error=error)


NO_BINDING = ("the program binds no `ModelNew`: define `class ModelNew(nn.Module)`, or bind the name to your model "
              "class (`ModelNew = MyModel`)")


_TRY = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


def module_level(body: list[ast.stmt]):
    """The statements that run at module level: the body, and the bodies of its ifs, trys, withs and loops (never
    a function's or a class's)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            yield from module_level(node.body + getattr(node, "orelse", []))
        elif isinstance(node, _TRY):
            yield from module_level(node.body + node.orelse + node.finalbody
                                     + [s for h in node.handlers for s in h.body])
        elif isinstance(node, ast.Match):
            yield from module_level([s for case in node.cases for s in case.body])


def _names(target: ast.AST) -> list[str]:
    """The names an assignment target binds (``a, (b, *c) = ...`` binds a, b and c; ``globals()["a"] = ...`` binds
    a: at module level with a literal key the static rules take it as the assignment it is)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Call) \
            and isinstance(target.value.func, ast.Name) and target.value.func.id == "globals" \
            and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
        return [target.slice.value]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _names(t)]
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return []


def module_bindings(tree: ast.Module, name: str = MODEL_NAME) -> list[ast.AST]:
    """Every module-level statement that binds ``name``, in source order: a class or function of that name, an
    assignment (plain, annotated with a value, a walrus, a ``for`` or ``with`` target) or an import; then those in a
    module-level function that declares the name ``global`` (`global_bindings`). That is what KernelBench reads: it
    executes the program and takes ``ModelNew`` from its namespace, however it got there."""
    return _binding_statements(module_level(tree.body), name) + [node for _, node in global_bindings(tree, name)]


def global_bindings(tree: ast.Module, name: str = MODEL_NAME) -> list[tuple[ast.FunctionDef, ast.AST]]:
    """(function, statement) for each binding of ``name`` in a module-level function that declares it ``global``
    (``def _register(): global ModelNew; ModelNew = _Fused``). Whether the function is called is the run's to find:
    a program that never binds the name fails there, saying so."""
    out = []
    for fn in module_level(tree.body):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        own = list(module_level(fn.body))  # the function's own statements, not its nested functions'
        if any(isinstance(s, ast.Global) and name in s.names for s in own):
            out += [(fn, node) for node in _binding_statements(own, name)]
    return out


def _binding_statements(nodes, name: str) -> list[ast.AST]:
    found = []
    for node in nodes:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found.append(node)
        elif isinstance(node, ast.Assign) and any(name in _names(t) for t in node.targets):
            found.append(node)
        elif isinstance(node, ast.AnnAssign) and node.value is not None and name in _names(node.target):
            found.append(node)
        elif isinstance(node, (ast.For, ast.AsyncFor)) and name in _names(node.target):
            found.append(node)
        elif isinstance(node, (ast.With, ast.AsyncWith)) and any(
                i.optional_vars is not None and name in _names(i.optional_vars) for i in node.items):
            found.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names):
            found.append(node)
        elif isinstance(node, ast.Expr) and any(isinstance(n, ast.NamedExpr) and n.target.id == name
                                                for n in ast.walk(node.value)):
            found.append(node)
    return found


def bound_under_main_only(source: str) -> bool:
    """Whether every binding of ``ModelNew`` is under ``if __name__ == "__main__":``, which a harness executing the
    program (KernelBench's, kforge's) never enters."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    outside = [n for n in tree.body if not is_main_guard(n)]
    return bool(module_bindings(tree)) and not module_bindings(ast.Module(body=outside, type_ignores=[]))


def never_run(tree: ast.Module) -> list[ast.stmt]:
    """The statements of the program's ``if __name__ == "__main__":`` blocks, which a harness that executes or imports
    it never enters (a self-test models write after their class), unless the program sets ``__name__`` itself or
    names it in a string (``globals()["__name__"]``); none then."""
    if any((isinstance(n, ast.Name) and n.id == "__name__" and not isinstance(n.ctx, ast.Load))
           or (isinstance(n, ast.Constant) and n.value == "__name__") for n in ast.walk(tree)):
        return []
    return [child for node in tree.body if is_main_guard(node) for child in node.body]


def is_main_guard(node: ast.stmt) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) \
        and test.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__"
                                               for c in test.comparators)


def binds_model_new(source: str) -> bool:
    """Whether the program binds ``ModelNew`` at module level (`module_bindings`); a program that does not parse
    is judged by its text, and its syntax error is left to the build, which reports it."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return bool(_MODELNEW.search(source))
    return bool(module_bindings(tree))


def _imports_it_only(source: str) -> bool:
    """Whether every binding of ``ModelNew`` in a block is an import (a usage example's, or a test's)."""
    try:
        found = module_bindings(ast.parse(source))
    except (SyntaxError, ValueError):
        return False
    return bool(found) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in found)


def code_blocks(text: str) -> list[tuple[str, str, bool]]:
    """Fenced blocks in a reply as (language, code, closed); an unclosed last fence runs to the end."""
    out = []
    for m in _FENCE.finditer(text):
        body = _dedent(m.group("body"), len(m.group("indent")))
        closed = not (m.end() == len(text) and not re.search(rf"^[ \t]*{re.escape(m.group('fence'))}[ \t]*$",
                                                             text[m.start("body"):], re.MULTILINE))
        out.append((m.group("lang").lower(), body.rstrip() + "\n", closed))
    return out


def _dedent(body: str, n: int) -> str:
    """A block fenced ``n`` columns in (a numbered list's item) without those columns, as Markdown reads it."""
    if not n:
        return body
    return "".join(line[min(n, len(line) - len(line.lstrip(" \t"))):] for line in body.splitlines(keepends=True))


def extract_code(reply: str, complete_only: bool = False) -> tuple[str | None, str | None]:
    """Pick the program from a reply: the last fenced Python block that binds ``ModelNew`` (`binds_model_new`)
    other than by an import alone (a usage example after the program imports it).

    The whole reply when it is itself a Python program binding ``ModelNew`` (fences in its docstrings or comments
    are examples, not the program).
    ``complete_only`` (a reply cut off at the token limit): only a closed fenced block counts, since an unclosed
    one, or the whole reply, may stop mid-program.
    Returns (source, None) or (None, reason) — the reason becomes a ``generation_failure`` message.
    """
    if not reply or not reply.strip():
        return None, "the reply is empty"
    if complete_only:
        return _from_blocks([b for b in code_blocks(reply) if b[2]])
    try:  # a whole program, its docstrings' fenced usage examples and all (a reply that is prose does not parse)
        if module_bindings(ast.parse(reply)):
            return reply, None
    except (SyntaxError, ValueError):
        pass
    return _from_blocks(code_blocks(reply))


def _from_blocks(blocks: list[tuple[str, str, bool]]) -> tuple[str | None, str | None]:
    with_model = [(lang, code, closed) for lang, code, closed in blocks if binds_model_new(code)]
    python_like = [b for b in with_model if b[0] in _PY_LANGS]
    # A usage example after the program (``from model_new import ModelNew``) imports the name; the program defines it.
    defining = [b for b in python_like or with_model if not _imports_it_only(b[1])]
    chosen = (defining or python_like or with_model)[-1] if with_model else None
    if chosen:
        return chosen[1], None
    if blocks:
        return None, (f"the reply has {len(blocks)} code block(s) but none binds `ModelNew` (a "
                      "`class ModelNew`, or `ModelNew = YourModel`); put the whole program, including ModelNew, in one "
                      "```python block")
    return None, "the reply contains no code block; answer with the whole program in one ```python block"


_UNDEFINED = re.compile(r"NameError\b[^\n]*name '(\w+)' is not defined")


def split_program_hint(reply: str | None, program: str | None, message: str) -> str:
    """Where the program failed on a name another code block of the reply defines (the kernel's source in one
    ```python block, ModelNew in the next), how to fix it; else ""."""
    m = _UNDEFINED.search(message or "")
    if not (m and reply and program):
        return ""
    name = m.group(1)
    for _, code, _ in code_blocks(reply):
        if code.strip() == program.strip():
            continue
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            continue
        if name in _top_level_names(tree):
            return (f" (`{name}` is defined in another code block of the reply, not in the one judged: put the "
                    "whole program in one ```python block)")
    return ""


def own_seed_hint(program: str | None, state: str) -> str:
    """Where a program that seeds torch's generator itself (``torch.manual_seed(42)`` before it builds its layers)
    gives wrong values, why: its weights come from its seed, not the one both models are built from; else ""."""
    if state != "numerical_mismatch" or not program:
        return ""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError):
        return ""
    dead = {id(n) for stmt in never_run(tree) for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and id(node) not in dead and isinstance(node.func, (ast.Name, ast.Attribute)) \
                and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "manual_seed":
            return (f" (the program seeds torch's generator itself, line {node.lineno}: weights it draws after that "
                    "come from its seed, not from the one the reference and ModelNew are built from, which kforge "
                    "keeps secret (KernelBench's harness seeds 42); drop the call and create the parameters as Model "
                    "does, in the same order)")
    return ""


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in module_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
