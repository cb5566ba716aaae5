"""The `Problem` dataclass and the parsing of one KernelBench-format file.

Parsing is static (``ast``): a problem file is only ever executed inside a verifier worker, so loading
a suite is cheap and a malformed file is reported before anything runs.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import KforgeError


class ProblemError(KforgeError, ValueError):
    """A problem file is malformed or an override does not fit it; the message names the file."""


#: Size presets a problem may define; "default" keeps the file's own constants.
SIZES = ("cpu", "gpu", "default")


def default_size(device: str) -> str:
    """The size preset a problem runs at when none is asked for: ``cpu`` on the CPU, else ``gpu``."""
    return "cpu" if device == "cpu" else "gpu"


@dataclass(frozen=True)
class Problem:
    """One reference program, at one size, ready to hand to a verifier worker."""

    name: str
    """File stem, e.g. ``19_ReLU``."""
    source: str
    """The program text as it will run (size overrides applied): what the worker executes and the model reads."""
    level: int | None = None
    """KernelBench level (1 single ops, 2 fusions, 3 architectures, 4 HF models) when known."""
    problem_id: int | None = None
    """Numeric id from the file name (``19`` of ``19_ReLU``) when it has one."""
    path: str | None = None
    """Where the file was read from (None for problems built from text)."""
    origin: str = "file"
    """``builtin``, ``kernelbench`` or ``file``."""
    size: str = "default"
    """Which preset is applied: ``cpu``, ``gpu``, ``default`` or ``custom`` (single overrides)."""
    constants: dict[str, Any] = field(default_factory=dict)
    """Effective top-level constants after overrides (derived ones included where computable)."""
    flops: float | None = None
    """Floating-point operations of one forward at this size (None when the file does not say)."""
    bytes: float | None = None
    """Fewest bytes one forward must move at this size (None when the file does not say)."""
    ops: tuple[str, ...] = ()
    """Torch operators that do the work; a candidate calling them has not replaced them."""
    tolerance: dict[str, float] | None = None
    """Per-problem ``atol``/``rtol`` override, else the dtype defaults apply."""
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The presets the file offers (``KFORGE["sizes"]``)."""
    variants: list[dict[str, Any]] | None = None
    """Other sizes the candidate must also be correct at (``KFORGE["variants"]``: constant overrides); None: derived
    from the size constants (`kforge.verify.variants`)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """The single constants set on top of the preset (``--set``, a config's overrides): a problem failing at them
    is told so, not called broken."""

    @property
    def key(self) -> str:
        """Stable identifier: ``level1/19_ReLU`` (or the name when the level is unknown)."""
        return f"level{self.level}/{self.name}" if self.level is not None else self.name

    def floor_seconds(self, peak_flops: float | None, peak_bytes_per_s: float | None) -> float | None:
        """Roofline floor: no correct implementation can run much faster than this."""
        terms = []
        if self.flops and peak_flops:
            terms.append(self.flops / peak_flops)
        if self.bytes and peak_bytes_per_s:
            terms.append(self.bytes / peak_bytes_per_s)
        return max(terms) if terms else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ops"] = list(self.ops)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Problem":
        data = dict(data)
        data["ops"] = tuple(data.get("ops") or ())
        return cls(**data)


_STEM = re.compile(r"^(\d+)_(.+)$")


def parse_stem(stem: str) -> tuple[int | None, str]:
    """``19_ReLU`` -> (19, ``19_ReLU``); a stem without a numeric prefix has no id."""
    m = _STEM.match(stem)
    return (int(m.group(1)), stem) if m else (None, stem)


def top_level_assignments(tree: ast.Module) -> list[tuple[str, ast.expr, ast.Assign | ast.AnnAssign]]:
    """Each name a top-level assignment binds, the expression its value comes from, and the statement:
    ``a = 1``; ``height = width = 64`` (both from the one value); ``height, width = 256, 256`` (element-wise);
    ``batch_size: int = 256`` (annotated)."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out.append((node.target.id, node.value, node))
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                out.append((target.id, node.value, node))
            elif (len(node.targets) == 1 and isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                  and len(target.elts) == len(node.value.elts) and all(isinstance(e, ast.Name) for e in target.elts)):
                out.extend((e.id, v, node) for e, v in zip(target.elts, node.value.elts))
    return out


def _evaluate_constants(source: str, tree: ast.Module) -> dict[str, Any]:
    """Top-level constants, derived ones included, by evaluating plain arithmetic in file order."""
    namespace: dict[str, Any] = {}
    safe_globals = {"__builtins__": {"int": int, "float": float, "min": min, "max": max, "abs": abs},
                    "math": math}
    for name, node, _ in top_level_assignments(tree):
        if name == "KFORGE":
            continue
        try:
            value = ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError):
            try:
                expr = ast.get_source_segment(source, node) or ""
                value = eval(compile(expr, "<constant>", "eval"), safe_globals, dict(namespace))  # noqa: S307
            except Exception:  # not plain arithmetic over earlier constants (e.g. a tensor): skip
                continue
        if isinstance(value, (int, float, bool, str, tuple, list)):
            namespace[name] = value
    return namespace


def _metadata(tree: ast.Module, where: str) -> dict[str, Any]:
    for name, node, _ in top_level_assignments(tree):
        if name == "KFORGE":
            try:
                meta = ast.literal_eval(node)
            except ValueError as exc:
                raise ProblemError(f"{where}: KFORGE must be a literal dict ({exc})") from None
            if not isinstance(meta, dict):
                raise ProblemError(f"{where}: KFORGE must be a dict")
            return meta
    return {}


def _check_structure(tree: ast.Module, where: str) -> None:
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    # A file may also bind these names by assignment (e.g. ``get_init_inputs = lambda: []``).
    assigned = {name for name, _, _ in top_level_assignments(tree)}
    if "Model" not in classes and "Model" not in assigned:
        raise ProblemError(f"{where}: no `class Model` defined")
    for fn in ("get_inputs", "get_init_inputs"):
        if fn not in functions and fn not in assigned:
            raise ProblemError(f"{where}: no `{fn}()` function defined")


def parse_source(source: str, where: str) -> ast.Module:
    """Parse and check the KernelBench structure; raises `ProblemError` naming ``where``."""
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise ProblemError(f"{where}: syntax error at line {exc.lineno}: {exc.msg}") from None
    _check_structure(tree, where)
    return tree


def apply_overrides(source: str, overrides: dict[str, Any], where: str) -> str:
    """Rewrite the top-level assignments of the overridden constants in the source text."""
    if not overrides:
        return source
    tree = ast.parse(source)
    nodes = {name: (value, stmt) for name, value, stmt in top_level_assignments(tree)}
    check_overrides(overrides, set(nodes), _evaluate_constants(source, tree), where)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def span(n: ast.AST) -> tuple[int, int]:  # ast columns are UTF-8 byte offsets; problem files are ASCII (checked)
        return offsets[n.lineno - 1] + n.col_offset, offsets[n.end_lineno - 1] + n.end_col_offset

    edits, split = [], {}
    for name, value in overrides.items():
        v, stmt = nodes[name]
        if len(getattr(stmt, "targets", ())) > 1:  # ``height = width = 64``: one value for several names, split to set one
            split[id(stmt)] = stmt
        else:
            edits.append((*span(v), repr(value)))
    for stmt in split.values():
        rhs = ast.get_source_segment(source, stmt.value)
        parts = [f"{t.id} = {repr(overrides[t.id])}" if isinstance(t, ast.Name) and t.id in overrides
                 else f"{ast.get_source_segment(source, t)} = {rhs}" for t in stmt.targets]
        edits.append((*span(stmt), "; ".join(parts)))
    text = source
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def check_overrides(overrides: dict[str, Any], names: set[str], constants: dict[str, Any], where: str,
                    verb: str = "override", place: str = "") -> None:
    """Each override names a top-level constant of the file (``names``) and has its kind: a whole number for an
    integer (``batch_size=2.5``, ``=1e3`` or ``=True`` would reach the problem's ``torch.randn`` and fail there as
    "a bug in the problem"), a number for a float, a tuple or list for a shape (``input_shape=128``). ``verb`` and
    ``place`` say in the message what the overrides do, and where."""
    missing = [k for k in overrides if k not in names or k == "KFORGE"]
    if missing:
        raise ProblemError(f"{where}: no top-level constant {', '.join(missing)} to {verb}{place} "
                           f"(constants: {', '.join(sorted(constants)) or 'none'})")
    for name, value in overrides.items():
        was = constants.get(name)
        if not _same_kind(value, was):
            kind = ("a whole number" if type(was) is int else "a number" if isinstance(was, float)
                    else "a tuple or list of sizes")
            raise ProblemError(f"{where}: {name} is {was!r} in the file; {value!r} is not {kind} to {verb} it "
                               f"to{place} (e.g. {name}={was!r})")


def _same_kind(value: Any, was: Any) -> bool:
    """Whether ``value`` may stand where the file has ``was`` (anything may replace a constant kforge could not
    evaluate or one that is neither a number nor a shape)."""
    if type(was) is int:
        return type(value) is int
    if isinstance(was, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(was, (tuple, list)):
        return isinstance(value, (tuple, list))
    return True


def _eval_metric(expr: Any, constants: dict[str, Any], where: str, what: str) -> float | None:
    if expr is None:
        return None
    if isinstance(expr, (int, float)):
        return float(expr)
    try:
        return float(eval(str(expr), {"__builtins__": {"min": min, "max": max}, "math": math},  # noqa: S307
                          dict(constants)))
    except Exception as exc:
        raise ProblemError(f"{where}: KFORGE[{what!r}] = {expr!r} does not evaluate: {exc}") from None


def problem_from_source(source: str, *, where: str, name: str, size: str | None = None,
                        overrides: dict[str, Any] | None = None, level: int | None = None,
                        problem_id: int | None = None, path: str | None = None,
                        origin: str = "file") -> Problem:
    """Build a `Problem` from program text at the requested size.

    ``size`` is a preset name (``cpu``/``gpu``/``default``; None means ``default``). A preset the file
    does not define falls back to the file's own constants, so KernelBench files run anywhere.
    ``overrides`` set single constants after the preset.
    """
    if not source.isascii():
        # Column offsets used for overrides are byte offsets; keep the rewrite exact.
        source = source.encode("ascii", "backslashreplace").decode("ascii")
    tree = parse_source(source, where)
    meta = _metadata(tree, where)
    presets = meta.get("sizes") or {}
    size = size or "default"
    if size not in SIZES:
        raise ProblemError(f"{where}: unknown size {size!r} (choose from {', '.join(SIZES)})")
    applied: dict[str, Any] = {}
    effective_size = "default"
    if size != "default" and size in presets:
        applied.update(presets[size])
        effective_size = size
    if overrides:
        applied.update(overrides)
        effective_size = "custom" if effective_size == "default" else f"{effective_size}+custom"
    text = apply_overrides(source, applied, where)
    constants = _evaluate_constants(text, ast.parse(text))
    tol = meta.get("tolerance")
    return Problem(
        name=name, source=text, level=level, problem_id=problem_id, path=path, origin=origin,
        size=effective_size, constants=constants,
        flops=_eval_metric(meta.get("flops"), constants, where, "flops"),
        bytes=_eval_metric(meta.get("bytes"), constants, where, "bytes"),
        ops=tuple(meta.get("ops") or ()), tolerance=dict(tol) if tol else None,
        sizes={k: dict(v) for k, v in presets.items()},
        variants=_variants(meta, tree, constants, where), overrides=dict(overrides or {}),
    )


def _variants(meta: dict[str, Any], tree: ast.Module, constants: dict[str, Any],
              where: str) -> list[dict[str, Any]] | None:
    """The file's declared variants, each checked as ``--set`` is: a misspelt constant would otherwise leave a
    variant out, and the kernel it was written to catch `correct`."""
    found = meta.get("variants")
    if found is None:
        return None
    if not (isinstance(found, list) and all(isinstance(v, dict) and v for v in found)):
        raise ProblemError(f"{where}: KFORGE['variants'] must be a list of dicts of constants (each setting at "
                           f"least one), not {found!r}")
    names = {name for name, _, _ in top_level_assignments(tree)}
    for i, v in enumerate(found):
        check_overrides(v, names, constants, where, verb="set", place=f" in KFORGE['variants'][{i}]")
    return [dict(v) for v in found]


def load_problem_file(path: str | Path, *, size: str | None = None, overrides: dict[str, Any] | None = None,
                      level: int | None = None, origin: str = "file") -> Problem:
    """Load one KernelBench-format file. The level comes from a ``levelN`` parent folder if not given."""
    p = Path(path)
    if not p.is_file():
        raise ProblemError(f"{p}: no such problem file")
    try:
        source = p.read_text()
    except UnicodeDecodeError:
        raise ProblemError(f"{p}: not a text file") from None
    if level is None:
        m = re.fullmatch(r"level(\d+)", p.parent.name)
        level = int(m.group(1)) if m else None
    problem_id, name = parse_stem(p.stem)
    return problem_from_source(source, where=str(p), name=name, size=size, overrides=overrides, level=level,
                               problem_id=problem_id, path=str(p), origin=origin)
