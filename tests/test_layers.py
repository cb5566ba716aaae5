"""kforge's layers: no module imports a module of a higher layer, and no import cycle between modules.

Every ``.py`` file under ``kforge/`` is parsed (nothing is imported). Function-local imports count: a lazy
import is still a dependency. So does a string naming a kforge module (``kforge.x.y`` or
``kforge.x.y:function``) when it is the whole string: that is a module imported at run time
(`kforge.sandbox.dispatch` handler paths, ``python -m`` targets, the tripwire's watched functions).

A new module goes into `LAYERS` under the lowest layer that holds everything it imports.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "kforge"

# Lowest first. A module may import its own layer and those before it; the longest matching prefix
# decides a module's layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("kforge", "kforge.cachefile", "kforge.candidate", "kforge.metrics", "kforge.errors",
                    "kforge.strict", "kforge.log", "kforge.manifest", "kforge.figure", "kforge.signals")),
    ("problems", ("kforge.problems",)),
    ("backends", ("kforge.backends",)),
    ("sandbox", ("kforge.sandbox",)),  # worker processes, child dispatch, harness, GPU facts, ceilings
    ("verify", ("kforge.verify",)),
    ("profile", ("kforge.profile",)),  # loads candidates with the verifier's config (VerifyConfig)
    ("workload", ("kforge.workload",)),  # whole models: profile by module, extract regions, assemble kernels
    ("llm", ("kforge.llm",)),
    ("agents", ("kforge.agents",)),
    ("loop", ("kforge.loop",)),  # the iterative chain and beam search, one interface
    ("tracking", ("kforge.tracking",)),
    ("results", ("kforge.report", "kforge.evaluate")),  # read runs and result rows; write tables and figures
    ("job", ("kforge.job",)),  # config (every group's typed view), pipeline, console, reference transfer
    ("apps", ("kforge.apps", "kforge.cli")),
]

_DOTTED = re.compile(r"kforge(?:\.\w+)+(?::\w+)?")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _existing(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a kforge module (``kforge.x.Class`` names module ``kforge.x``)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def imports_of(name: str, source: str, modules: dict[str, Path], is_package: bool = False) -> set[str]:
    """The kforge modules that module ``name`` imports anywhere in ``source`` (or names as a whole string)."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module.
            targets = [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.fullmatch(node.value):
            targets = [node.value.partition(":")[0]]
        for t in targets:
            if t == "kforge" or t.startswith("kforge."):
                hit = _existing(t, modules)
                if hit and hit != name:
                    found.add(hit)
    return found


def layer_of(module: str) -> int | None:
    best, level = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), i
    return level


def graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {m: imports_of(m, p.read_text(), modules, p.name == "__init__.py") for m, p in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    missing = [m for m in all_modules() if layer_of(m) is None]
    assert not missing, f"put these modules into LAYERS in {Path(__file__).name}: {missing}"


def test_no_module_imports_a_higher_layer():
    bad = []
    for m, targets in graph().items():
        for t in sorted(targets):
            lm, lt = layer_of(m), layer_of(t)
            if lm is not None and lt is not None and lt > lm:
                bad.append(f"{m} ({LAYERS[lm][0]}) imports {t} ({LAYERS[lt][0]})")
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_analysis_sees_lazy_relative_and_runtime_imports():
    """The checks above only mean something if the parser finds these (and ignores docstrings)."""
    modules = {n: Path() for n in ("kforge", "kforge.sandbox", "kforge.sandbox.pool", "kforge.verify",
                                   "kforge.verify.worker", "kforge.profile", "kforge.profile.runner")}
    source = '''"""Mentions `kforge.verify.worker` in prose only."""
from . import pool
def lazy():
    from ..verify import worker
    from ..profile.runner import main
TABLE = {"run": "kforge.verify.worker:run"}
'''
    assert imports_of("kforge.sandbox.env", source, modules) == {"kforge.sandbox.pool", "kforge.verify.worker",
                                                                "kforge.profile.runner"}
    assert imports_of("kforge.sandbox", "from .pool import WorkerPool", modules, is_package=True) == \
        {"kforge.sandbox.pool"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
