"""How a shape variant's constants reach the candidate, which runs in the variant's namespace (`shown_and_followed`):
the test configuration it was shown stays as shown; what the problem's own model reads follows the variant."""

from __future__ import annotations

import ast


def model_reads(source: str) -> set[str]:
    """The module-level names the problem's own code reads when it runs: in its functions and classes other than
    ``get_inputs`` and ``get_init_inputs``, and, through them, the module-level assignments those names come from
    (``input_shape = (batch_size, dim)`` read by the model makes ``batch_size`` and ``dim`` its too)."""
    tree = ast.parse(source)
    reads: set[str] = set()
    defs: dict[str, set[str]] = {}  # module-level name -> the names its assignment reads
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name not in ("get_inputs", "get_init_inputs"):
                reads |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        defs.setdefault(n.id, set()).update(used)
    todo = list(reads)
    while todo:
        for name in defs.get(todo.pop(), ()):
            if name not in reads:
                reads.add(name)
                todo.append(name)
    return reads


def shown_and_followed(overrides: dict, problem: dict, reads: set[str]) -> tuple[dict, dict]:
    """How a variant's constants reach the candidate, which runs in the variant's namespace: (the constants set back
    to the values it was shown, the overrides its restatements give way to).

    A constant only ``get_inputs`` and ``get_init_inputs`` read is test configuration: the candidate sees the
    problem's value, at import and after, so one that sizes its output by ``batch_size`` rather than by its input
    has baked the size in and fails at the variant, as it would on any other input. A constant the problem's own
    model reads (level 3's VanillaRNN sizes its hidden state by ``batch_size`` in ``__init__``) is part of the
    problem, and follows the variant: where the candidate restates it with the problem's value (KernelBench
    generations repeat the whole file, ``batch_size = 8`` and all), the variant's value counts
    (`restated_take_the_variant`); judged against itself, the VanillaRNN otherwise failed its first variant."""
    shown = {k: problem[k] for k in overrides if k in problem and k not in reads}
    return shown, {k: v for k, v in overrides.items() if k in reads}


def restated_take_the_variant(namespace: dict, overrides: dict, problem: dict) -> None:
    """Where the candidate restated a constant of ``overrides`` with the problem's own value, the variant's value
    counts (`shown_and_followed`). A size of the candidate's own stays its own, and whatever it computed from the
    constant on import (a size written into its kernel's source) keeps the value it computed."""
    for name, value in overrides.items():
        if name in namespace and name in problem and type(namespace[name]) is type(problem[name]) \
                and namespace[name] == problem[name]:
            namespace[name] = value
