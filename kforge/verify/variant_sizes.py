"""Which numbers of a problem are sizes: the size constants its names give (`size_constants`) and the literal sizes
its input functions write (`literal_sizes`), as `kforge.verify.variants` varies them."""

from __future__ import annotations

import ast
import re

from ..problems import Problem
from ..problems.problem import top_level_assignments
from .variant_constants import input_helpers

#: Names of constants that are sizes (case-insensitive, anywhere in the name).
#: Single letters are sizes (``B, S, D``, ``M, N, K``) but ``G``, a group count.
SIZE_NAME = re.compile(r"batch|bsz|^bs$|size|dim|feat|channel|depth|height|width|length|len\b|seq|token|hidden|"
                       r"embed|vocab|time_?steps?|^[a-fh-z]$|^n[xyz]$|^res$|resolution|^c_?(in|out)$|^d_|"
                       r"(^|_)ch(_|$)|planes|classes|^n_|_n$|num_(?!head|group|layer)|rows|cols|elements|units|"
                       r"points|total|numel|spatial|^hw$|vec|samples|items|nodes|pixels|voxels|"
                       # an Inception module's branch widths (``out_3x3``, ``reduce_5x5``, ``pool_proj``), a DenseNet's
                       # growth, NetVLAD's clusters: channel counts by other names
                       r"^out_|^reduce_|_proj$|growth|clusters", re.I)
#: Names that look like sizes but are not free to change (axes, kernel geometry, divisors, a quantizer's bits, an
#: iteration count). A bare ``dim`` is both in KernelBench: the axis (``dim = 1``, under `MIN_SIZE`) or the row length
#: (``dim = 393216``, a size). The short words count only as words of the name: ``timesteps`` is a length, not an
#: ``eps``; ``num_bits`` a quantizer's setting, not a count of things an input holds.
#: A count of heads (``n_heads``, ``num_kv_heads``, ``nhead``), not the size of one (``head_dim``, ``d_head``,
#: ``dim_head``, ``head_size``: Mamba2's ``d_head = 64`` is a size that a kernel bakes in as often as any).
HEAD_COUNT = r"(?<!d_)(?<!dim_)head(?!s?_?(?:dim|size))"
NOT_A_SIZE = re.compile(r"kernel|stride|dilation|group|" + HEAD_COUNT + r"|axis|window|pool(?!_?proj)|"
                        r"(?<!growth)(^|_)(pad|padding|scale|eps|epsilon|prob|probs|rate|bits|iters?|iterations)(_|$)",
                        re.I)
MIN_SIZE = 8
"""Constants below this are left alone: too small to shrink, and often an axis or a count of something; but a batch
(`BATCH_NAME`)."""
#: A batch's names: a batch of 2 to 7 (KernelBench's ``batch_size = 4``) is varied by one, where any other constant
#: that small may be an axis, a channel count of RGB or a kernel's side.
BATCH_NAME = re.compile(r"batch|bsz|^bs$|^b$", re.I)
#: Tuple constants that are shapes (KernelBench's scans and losses: ``input_shape = (32768,)``, the row length of
#: ``torch.rand(batch_size, *input_shape)``): their elements of `MIN_SIZE` or more are sizes.
SHAPE_NAME = re.compile(r"shape|size|dims|widths", re.I)


def is_size(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= MIN_SIZE


def is_shape(v) -> bool:
    """A shape constant's value: a tuple, or a list (``input_shape = [128, 4096]``), of numbers, or of shapes
    (``input_shapes = [(512, 2048), (2048,)]``)."""
    return isinstance(v, (tuple, list))


def has_size(v) -> bool:
    """Whether a shape, or a shape within it, holds a size."""
    return any(has_size(e) if is_shape(e) else is_size(e) for e in v)


def size_constants(problem: Problem) -> dict[str, int | tuple]:
    """The problem's module-level constants that look like sizes, in file order: integers, and shapes written as
    tuples or lists of numbers (``input_shape = (32768,)``); a tuple written with names (``bias_shape =
    (out_channels, 1, 1)``) follows the sizes it names, and is left to them (its literals are `literal_sizes`)."""
    shapes, free = _number_tuples(problem.source), _free_counts(problem.source)
    return {k: v for k, v in problem.constants.items() if (not NOT_A_SIZE.search(k) or k in free) and (
        (is_size(v) and (SIZE_NAME.search(k) or k in free))
        or (type(v) is int and 2 <= v < MIN_SIZE and BATCH_NAME.search(k))
        or (k in shapes and is_shape(v) and SHAPE_NAME.search(k) and has_size(v)))}


def _number_tuples(source: str) -> set[str]:
    """Names the file's top level binds, alone, to a tuple or list written without names (``(8192 * 2,)``
    counts; so does a list of them, ``input_shapes = [(512, 2048), (2048,)]``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {name for name, value, _ in top_level_assignments(tree) if _numbers_only(value)}


def _numbers_only(value: ast.expr) -> bool:
    """A tuple or list written with numbers alone, or such a list repeated (``[1024] * 16``, KernelBench's
    ``hidden_layer_sizes``)."""
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        value = value.left if isinstance(value.left, (ast.Tuple, ast.List)) else value.right
    return isinstance(value, (ast.Tuple, ast.List)) and not any(isinstance(x, ast.Name) for x in ast.walk(value))


#: Counts that are sizes where nothing but the inputs reads them (`_free_counts`).
COUNT_NAME = re.compile(HEAD_COUNT + r"|group", re.I)


def _free_counts(source: str) -> set[str]:
    """Head and group counts that only ``get_inputs`` reads (KernelBench's scaled-dot-product attention draws its
    queries as ``(batch_size, num_heads, sequence_length, embedding_dimension)``): a dimension of the inputs, which
    no width must divide, and a kernel with it baked in passed every variant while head counts were never varied.
    A count the model or ``get_init_inputs`` reads stays a divisor (`NOT_A_SIZE`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    counts = {name for name, _, _ in top_level_assignments(tree) if COUNT_NAME.search(name)}
    if not counts:
        return set()
    inside, elsewhere = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value  # an assignment's own name is not a read of it
            names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} if value is not None else set()
        else:
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        (inside if isinstance(node, ast.FunctionDef) and node.name == INPUT_FUNCTIONS[0] else elsewhere).update(names)
    return {c for c in counts if c in inside and c not in elsewhere}


#: The functions whose integer literals are the sizes of a file that names none as constants.
INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")
#: Keyword arguments whose literals are not sizes (``dim=``, ``high=``, a seed, kernel geometry).
NOT_A_SIZE_ARG = re.compile(NOT_A_SIZE.pattern + r"|^dim$|seed|low|high|dtype|device", re.I)
#: Calls whose positional numbers (other than a shape written as a tuple or list) are values, not sizes: the bounds
#: of ``torch.randint(0, 256, (64, 4096))``, the fill of ``torch.full((64, 64), 10)``, a clamp's range.
VALUE_CALL = re.compile(r"(^|\.)(randint|randint_like|full|full_like|fill_|clamp|clamp_|clip|random_)$")


def _bounds(fn: ast.AST) -> list[ast.Constant]:
    """The numbers ``fn`` passes positionally to a `VALUE_CALL` (randint's bounds, a fill)."""
    return [n for node in ast.walk(fn) if isinstance(node, ast.Call) and VALUE_CALL.search(ast.unparse(node.func))
            for a in [*node.args, *(k.value for k in node.keywords if k.arg in ("low", "high"))]
            if not isinstance(a, (ast.Tuple, ast.List))
            for n in ast.walk(a) if isinstance(n, ast.Constant) and type(n.value) is int]


def _values(fn: ast.AST) -> set[int]:
    """The ids of the nodes under ``fn`` that are values rather than sizes: a keyword that is not a size (``dim=``,
    ``high=``), a seeding call's argument, a bound or fill (`VALUE_CALL`), and a number that scales or shifts a
    tensor (``torch.randn(16, 1024) * 8``, ``x + 128``)."""
    skip = {id(n) for n in _bounds(fn)}
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg and NOT_A_SIZE_ARG.search(node.arg):
            skip.update(id(n) for n in ast.walk(node.value))
        elif isinstance(node, ast.Call) and "seed" in ast.unparse(node.func).lower():
            skip.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.BinOp) and any(isinstance(o, ast.Call) for o in (node.left, node.right)):
            skip.update(id(o) for o in (node.left, node.right) if isinstance(o, ast.Constant))
    return skip


def _shape_assignments(tree: ast.Module) -> list[ast.expr]:
    """Top-level shapes written with names and numbers (``input_shape = (batch_size, 4096)``): their numbers are
    literal sizes beside the constants (a shape of numbers alone is a size constant, `size_constants`)."""
    found = [value for name, value, _ in top_level_assignments(tree) if SHAPE_NAME.search(name)
             and isinstance(value, (ast.Tuple, ast.List)) and any(isinstance(x, ast.Name) for x in ast.walk(value))]
    return list({id(v): v for v in found}.values())  # ``a = b = (n, 64)``: one value


def literal_sizes(source: str) -> list[ast.Constant]:
    """The integer literals of 8 or more that the file's ``get_inputs`` and ``get_init_inputs`` write
    (``torch.randn(16, 1024)``, ``return [1024, 512]``), with the helpers only they call (``_make_input()``), and
    top-level shapes that mix names and numbers write (`_shape_assignments`), ``get_inputs``'s first: not values
    (`_values`: ``dim=``, ``high=``, a seed, randint's bounds, a tensor's scale)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    helpers = sorted((n for n in input_helpers(tree) if n in functions and n not in INPUT_FUNCTIONS),
                     key=lambda n: functions[n].lineno)
    scopes = [functions[n] for n in (INPUT_FUNCTIONS[0], *helpers, *INPUT_FUNCTIONS[1:]) if n in functions]
    scopes += _shape_assignments(tree)
    found = [n for scope in scopes for n in _literals(scope)]
    # a bound that equals a size is that size (``torch.randint(0, 1000, (64, 100))`` indexes a row of 1000)
    sizes = {n.value for n in found}
    return found + [n for scope in scopes for n in _bounds(scope) if n.value in sizes]


def _literals(node: ast.AST) -> list[ast.Constant]:
    """The size-like integer literals under ``node``, in source order."""
    skip = _values(node)
    return sorted((n for n in ast.walk(node) if isinstance(n, ast.Constant) and type(n.value) is int
                   and n.value >= MIN_SIZE and id(n) not in skip), key=lambda n: (n.lineno, n.col_offset))


def is_literal(key: str) -> bool:
    """Whether an override's key names literal sizes: a value (``"1024"``: wherever it is written) or its first
    occurrence alone (``"1024@0"``: the leading side of ``torch.randn(1024, 1024)``)."""
    return re.fullmatch(r"\d+(@0)?", key) is not None


def literal_value(key: str) -> int:
    return int(key.split("@")[0])


def rewrite_literals(source: str, literals: list[ast.Constant], values: dict[str, int]) -> str:
    """``source`` with each of ``literals`` whose value is a key of ``values`` written as that key's value (the
    first of them alone, for a key ``"1024@0"``)."""
    lines = source.splitlines(keepends=True)
    first = {}
    for n in literals:
        first.setdefault(n.value, n)
    for n in sorted(literals, key=lambda n: (n.lineno, n.col_offset), reverse=True):  # later edits first
        new = values.get(f"{n.value}@0") if first[n.value] is n and f"{n.value}@0" in values else values.get(str(n.value))
        if new is not None:
            line = lines[n.lineno - 1]
            lines[n.lineno - 1] = line[:n.col_offset] + str(new) + line[n.end_col_offset:]
    return "".join(lines)
