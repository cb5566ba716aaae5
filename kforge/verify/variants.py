"""Shape variants: the problem at sizes the candidate was not shown, a correctness check under the kforge rules.

LLM-written kernels often hard-code the sizes they were shown (an output allocated as ``{64, 8192}``, loops
bounded by constants). A problem may list its own variants (``KFORGE["variants"]``: a list of constant
overrides); a file that lists none gets three from its module-level size constants (`shape_variants`): each
size-like integer (``batch_size``, ``dim``, ``in_features``, ... of 8 or more, and each such element of a shape
written as a tuple of numbers, ``input_shape = (32768,)`` in KernelBench's scans) at about three quarters, odd
and not a multiple of 16, all together; the first (batch-like) one alone at about half; and all of them a
sixteenth larger, where a loop bounded by the sizes it was shown, guarded so that it is right at any smaller
size, leaves rows or columns unwritten (it needs about a sixteenth more memory per size, more where the
fallback below rounds a small size up). A file with no size constants at all (``torch.randn(16, 1024)`` in
``get_inputs``) gets the same variants from the integer literals its ``get_inputs`` and ``get_init_inputs`` write
(`literal_sizes`: not randint's bounds or a tensor's scale; a helper only they call and a top-level shape mixing a
constant with a number count too), each value changed wherever those functions write it (the first side of a square
``torch.randn(1024, 1024)`` alone in the halved variant); a file with constants varies the literal sizes it writes
beside them too. Where the reference itself fails
at a derived variant (a width its head count must divide, say), the same sizes rounded to odd multiples of 24
(of 48 with 16 heads: the file's head and group counts divide them), down, or up for the larger variant, are
tried instead (literals under the step, which may be head counts, keep their values there and join the step);
where it fails there too, the same again with each size under the step that the counts divide in the problem
made a multiple of them (16 channels in 8 groups: 11 becomes 8); where it fails there too, the variant in the
problem's own proportions (`_proportional`: an image stays a whole number of patches); then each size a multiple
of the power of two (up to 16) its value in the problem is (`_aligned`: an image a UNet halves four times); then
the rounded sizes with one constant at a time back at the problem's value (`_reverted`: a size the model fixes
without reading its constant). A variant the reference fails at every way is skipped with a note.
The candidate's side of the check is `kforge.verify.variant_checks`.
"""

from __future__ import annotations

import math
import re

from ..problems import Problem, ProblemError, problem_from_source
from .protocol import ShapeVariant
from .variant_sizes import (
    HEAD_COUNT,
    MIN_SIZE,
    NOT_A_SIZE,
    is_literal,
    is_shape,
    is_size,
    literal_sizes,
    literal_value,
    rewrite_literals,
    size_constants,
)


def _smaller(n: int, fraction: float) -> int:
    """About ``fraction`` of ``n``, odd and not a multiple of 16 (kernels tiled by 16, 32 or 128 must mask); one
    less for a batch under `MIN_SIZE` (4 -> 3, 2 -> 1)."""
    if n < MIN_SIZE:
        return max(1, n - 1)
    v = max(3, int(n * fraction))
    if v % 2 == 0:
        v -= 1
    while v % 16 == 0 or v >= n:
        v -= 2
    return max(3, v)


#: Constants that sizes must be multiples of (head and group counts): a fallback variant keeps them dividing.
DIVISOR_NAME = re.compile(HEAD_COUNT + r"|group", re.I)


def _counts(problem: Problem) -> int:
    """What the problem's head and group counts ask its sizes to be multiples of (1 where it names none):
    KernelBench has ``num_groups = 512`` beside ``hidden_size = 8192``."""
    unit = 1
    for k, v in problem.constants.items():
        if isinstance(v, int) and not isinstance(v, bool) and v >= 2 and DIVISOR_NAME.search(k):
            unit = math.lcm(unit, v)
    return unit


def _step(problem: Problem) -> int:
    """The step fallback sizes are odd multiples of: 24 (2, 3, 4, 6, 8 and 12 divide it, 16 does not), times
    what the problem's head and group counts add (16 heads: 48; 512 groups: 1536)."""
    return math.lcm(24, _counts(problem))


def _divisor(problem: Problem) -> int:
    """What the second fallback makes small sizes multiples of: the head and group counts, or 8 where the file
    names none (``num_groups=4`` as a default argument of ``Model.__init__``: 2, 4 and 8 divide it)."""
    counts = _counts(problem)
    return counts if counts > 1 else 8


def _divisible(n: int, step: int, up: bool = False, unit: int = 1) -> int:
    """``n`` rounded down (``up``: up) to an odd multiple of ``step``; a size under ``step`` to a multiple of
    ``unit`` (at least ``unit``), where that is not 1."""
    if n < step:
        return max(unit, unit * (-(-n // unit) if up else n // unit))
    v = -(-n // step) if up else n // step
    return step * (v if v % 2 else v + 1 if up else v - 1)


def _fallback(overrides: dict, original: dict, step: int, unit: int = 1) -> dict | None:
    """The variant's sizes made multiples of ``step`` the way they moved (a grown size rounds up, so the
    variant stays larger than the problem); a size under the step becomes a multiple of the head and group
    counts (``unit``) where its value in the problem is one (a channel count 8 groups divide: 11 -> 8), else
    stays. None where nothing changes."""
    def rounded(v, was):
        if is_shape(v):
            return type(v)(rounded(e, o) for e, o in zip(v, was))
        return _divisible(v, step, up=v > was, unit=unit if was % unit == 0 else 1)

    out = {k: rounded(v, original[k]) for k, v in overrides.items()}
    return None if out == overrides else out


def _each(v, fn):
    """``fn`` of a size, or of each size in a shape, or in the shapes a shape holds (elements under `MIN_SIZE`
    kept)."""
    if is_shape(v):
        return type(v)(_each(e, fn) if is_shape(e) else fn(e) if is_size(e) else e for e in v)
    return fn(v)


def _larger(n: int) -> int:
    """About a sixteenth more than ``n`` (at least one more), odd and not a multiple of 16."""
    v = n + max(1, n // 16)
    v += 1 - v % 2
    while v % 16 == 0:
        v += 2
    return v


def _apart(variant: dict, up: bool = False) -> dict:
    """``variant`` with constants that came out equal made different (the later ones 2 less each time, odd and not
    a multiple of 16 still): a square image (``height = width = 128``), a GEMM with ``in_features = out_features``
    and KernelBench's ``dim1 = 256, dim2 = 257`` (both 191 at three quarters) would otherwise move together in every
    variant, and a kernel that takes one for the other passed them all. A literal size keeps the value of a constant
    equal to it: ``get_init_inputs`` returning ``[1024]`` beside ``dim = 1024`` is most often ``dim`` restated.
    ``up``: the later ones 2 more each time (the larger variant, whose sizes stay above the problem's)."""
    out, taken = {}, set()
    for k, v in variant.items():
        if isinstance(v, int) and v >= MIN_SIZE and not is_literal(k):
            start, move = v, 2 if up else -2
            while v in taken:
                v += move
                v += move * (v % 16 == 0)
                if v <= MIN_SIZE and not up:  # no room below (seven branch widths of 16 beside a square image)
                    v, move = start, 2
            taken.add(v)
        out[k] = v
    return out


def _derived(sizes: dict) -> list[dict]:
    """All the sizes at about three quarters, none equal to another (`_apart`); the first alone at about half (the
    first element of a lone shape with several: a kernel that assumes its dimensions equal fails there); all of
    them a sixteenth larger."""
    # the first that is not a count only the inputs read (``num_groups = 8`` ahead of the sizes it groups)
    first = next((k for k in sizes if not NOT_A_SIZE.search(k)), next(iter(sizes)))
    out = [_apart({k: _each(v, lambda n: _smaller(n, 0.75)) for k, v in sizes.items()})]
    if len(sizes) > 1:
        out.append({first: _each(sizes[first], lambda n: _smaller(n, 0.5))})
    elif is_shape(shape := sizes[first]) and sum(map(is_size, shape)) > 1:
        lead = next(i for i, e in enumerate(shape) if is_size(e))
        out.append({first: type(shape)(_smaller(e, 0.5) if i == lead else e for i, e in enumerate(shape))})
    out.append(_apart({k: _each(v, _larger) for k, v in sizes.items()}, up=True))
    return out


def shape_variants(problem: Problem, declared: list[dict] | None = None) -> list[ShapeVariant]:
    """The variants a verification checks: ``declared`` (the file's ``KFORGE["variants"]``) or derived ones."""
    sizes: dict = {}
    if declared is not None:
        overrides = [dict(d) for d in declared]
    else:
        sizes = size_constants(problem)
        if not sizes:
            return _literal_variants(problem)
        # Sizes it writes as literals beside its constants (``torch.randn(batch_size, 1024)``) vary with them, one
        # equal to a constant's value too (``M = 256`` beside ``torch.randn(K, 256)``)
        overrides = _derived({**sizes, **{str(n.value): n.value for n in literal_sizes(problem.source)}})
    out, step = [], _step(problem)
    for o in overrides:
        constants = {k: v for k, v in o.items() if not is_literal(k)}
        try:
            source = _with(problem, o)
        except ProblemError:
            continue  # a declared constant the file lacks: not a variant of it
        fallbacks = [] if declared is not None else _fallbacks(constants, problem.constants, step, _divisor(problem),
                                                               sizes)
        if len(constants) < len(o):  # the literals changed too: the constants' change alone first (a model that
            # fixes a literal's size in its layers, VGG's classifier for 224 x 224, runs there), then each
            # fallback with the literals rounded as the constants are (a literal channel count its groups divide),
            # then without them
            shown = {**problem.constants, **{k: literal_value(k) for k in o if is_literal(k)}}
            fallbacks = [constants] * bool(constants) + [
                f for f in _fallbacks(o, shown, step, _divisor(problem), sizes) if f not in fallbacks] + fallbacks
        out.append(ShapeVariant(overrides=o, source=source, fallbacks=fallbacks,
                                fallback_sources=[_with(problem, f) for f in fallbacks]))
    return out


def _with(problem: Problem, overrides: dict) -> str:
    """The problem's source at ``overrides``: its constants' (by name) through `problem_from_source`, then its
    literal sizes' (by value, ``{"1024": 767}``) in ``get_inputs`` and ``get_init_inputs``."""
    constants = {k: v for k, v in overrides.items() if not is_literal(k)}
    source = problem_from_source(problem.source, where=problem.path or problem.key, name=problem.name,
                                 overrides=constants).source if constants else problem.source
    literals = {k: v for k, v in overrides.items() if is_literal(k)}
    return rewrite_literals(source, literal_sizes(source), literals) if literals else source


def _fallbacks(overrides: dict, original: dict, step: int, unit: int, sizes: dict) -> list[dict]:
    """The sizes rounded to odd multiples of the step (those the variant had apart kept apart first,
    `_stepped_apart`); then, if the reference fails there too, with the sizes under
    the step that the head and group counts divide in the problem made multiples of them (a channel count under
    24 that 8 groups divide); then the variant in the problem's own proportions (`_proportional`); then each size
    a multiple of the power of two its value in the problem is (`_aligned`); then the first of these, and the
    proportional one, with one constant at a time back at the problem's value (`_reverted`: a free head count back
    at 8 where its heads' width times it must make the embedding). None at the problem's own sizes."""
    out: list[dict] = []
    rounded, proportional = _fallback(overrides, original, step), _proportional(overrides, original, sizes)
    for f in (_stepped_apart(rounded, overrides, original, step), rounded, _fallback(overrides, original, step, unit),
              proportional, _aligned(overrides, original), _halved(overrides, original),
              *_reverted(rounded or overrides, original), *_reverted(proportional or {}, original)):
        # not the problem's own sizes: a count at its own value is a multiple of itself, and "correct on shape
        # variant num_groups=8" named the problem's shape
        if f is not None and f != overrides and f not in out and any(f[k] != original[k] for k in f):
            out.append(f)
    return out


def _stepped_apart(rounded: dict | None, overrides: dict, original: dict, step: int) -> dict | None:
    """``rounded`` with sizes the variant made different (`_apart`) that rounding made equal again moved apart by
    two steps each (down where the variant went down, while a step is left): KernelBench's ``in_features =
    out_features = 8192`` came back equal at every fallback, and a GEMM taking one for the other passed. Tried
    before ``rounded`` itself, which stays for a model that asks them to be equal. None where nothing is equal."""
    if rounded is None:
        return None
    out, taken = {}, {}
    for k, v in rounded.items():
        if type(v) is int and v >= MIN_SIZE and not is_literal(k):
            start, move = v, -2 * step if overrides[k] < original[k] else 2 * step
            while v in taken and overrides[taken[v]] != overrides[k]:
                v += move
                if v <= 0:  # no room below: above instead
                    v, move = start + 2 * step, 2 * step
            taken.setdefault(v, k)
        out[k] = v
    return None if out == rounded else out


#: The largest power of two `_aligned` rounds a size to a multiple of.
ALIGN = 16


def _aligned(overrides: dict, original: dict) -> dict | None:
    """The variant with each size a multiple of the power of two (up to `ALIGN`) that its value in the problem is
    a multiple of: the nearest one on the side the size moved. Sizes under four such steps in the problem (a batch
    of 8, 16 channels) stay, so that the variant's memory stays near the problem's. A model that halves an image
    four times asks for multiples of 16 (KernelBench's UNet concatenates each level with the one below it), which
    odd multiples of the step never are. None where nothing changes."""
    def rounded(v, was):
        if is_shape(v):
            return type(v)(rounded(e, o) for e, o in zip(v, was))
        if v == was or not is_size(was) or not isinstance(v, int):
            return v  # a tuple's element the variant left alone (an axis, 0, a float)
        a = min(ALIGN, was & -was)
        if was < 4 * a:
            return v
        r = round(v / a) * a
        r += a if v > was and r <= was else -a if v < was and r >= was else 0
        return r if r > 0 else v

    out = {k: rounded(v, original[k]) for k, v in overrides.items()}
    return None if out == overrides else out


def _halved(overrides: dict, original: dict) -> dict | None:
    """The variant with each size that is a power of two in the problem, and that the variant moved, at half its
    value there: a model that asks for powers of two (a Hadamard transform, a radix-2 FFT, a bitonic sort) runs
    at none of the other fallbacks. None where nothing changes."""
    def halved(v, was):
        if is_shape(v):
            return type(v)(halved(e, o) for e, o in zip(v, was))
        if v == was or not is_size(was) or was & (was - 1):
            return v
        return was // 2

    out = {k: halved(v, original[k]) for k, v in overrides.items()}
    return None if out == overrides else out


def _reverted(overrides: dict, original: dict) -> list[dict]:
    """The variant with one constant at a time back at its value in the problem, where another constant still
    changes: a size the model fixes without reading its constant (KernelBench's level3/32 sizes a Linear by the
    image size its constructor defaults to, not by ``image_size``) leaves the other sizes checked."""
    return [{**overrides, k: original[k]} for k in overrides
            if any(overrides[o] != original[o] for o in overrides if o != k)]


def _proportional(overrides: dict, original: dict, sizes: dict) -> dict | None:
    """The variant with each size that another size divides in the problem kept a multiple of it: the same multiple
    of that size's variant value, or, where the variant leaves that size alone, the multiple of it nearest the
    variant's value on the variant's side. A model may ask that one size divide another (an image its patch size,
    a sequence its block length: KernelBench's level 3 asserts both), which rounding to a step cannot keep where
    the divisor is itself a size. The largest such divisor counts, smaller sizes first, so chains hold (a patch of
    16, an image of 224, an embedding of 512: 11, 154, 352). None where nothing changes."""
    ints = {k: v for k, v in sizes.items() if is_size(v)}
    out = dict(overrides)
    for b in sorted((k for k in overrides if k in ints), key=lambda k: ints[k]):
        divisors = [a for a in ints if a != b and ints[a] < ints[b] and ints[b] % ints[a] == 0]
        if not divisors:
            continue
        a = max(divisors, key=lambda k: ints[k])
        if a in out:
            out[b] = out[a] * (ints[b] // ints[a])
        else:  # the divisor keeps its value: the variant's size becomes a multiple of it, on the variant's side
            n = out[b] // ints[a] if out[b] < ints[b] else -(-out[b] // ints[a])
            out[b] = ints[a] * max(1, n)
    return None if out == overrides else out


def _literal_variants(problem: Problem) -> list[ShapeVariant]:
    """Variants of a file that writes its sizes as literals in ``get_inputs`` / ``get_init_inputs``: the
    overrides' keys are the literal values (``{"1024": 767}``)."""
    literals = literal_sizes(problem.source)
    if not literals:
        return []
    sizes = {str(n.value): n.value for n in literals}  # first seen first: get_inputs's leading size
    derived = _derived(sizes)
    lead = literals[0].value
    if sum(n.value == lead for n in literals) > 1:  # ``torch.randn(1024, 1024)``: its first side alone, halved, so
        # that a kernel that takes its input for square fails (keyed by value, the two sides would move together)
        alone = {f"{lead}@0": _smaller(lead, 0.5)}
        derived = [derived[0], alone, derived[-1]]
    out, step = [], _step(problem)
    for o in derived:
        # rounded to the step; then each literal back at its value while the others change (a Linear the model
        # sizes with the literal itself, ``nn.Linear(1024, 512)``, leaves the batch's change checked)
        fallbacks = [f for f in [_literal_fallback(o, step), *_reverted(o, {k: literal_value(k) for k in o})] if f]
        out.append(ShapeVariant(overrides=o, source=rewrite_literals(problem.source, literals, o), fallbacks=fallbacks,
                                fallback_sources=[rewrite_literals(problem.source, literals, f) for f in fallbacks]))
    return out


def _literal_fallback(overrides: dict[str, int], step: int) -> dict[str, int] | None:
    """`_fallback` for literals, which have no names to tell a head count by: values under the step (8 heads,
    12 groups) keep theirs and join the step, which the other sizes become multiples of."""
    counts = {k: literal_value(k) for k in overrides if literal_value(k) < step}
    step = math.lcm(step, *counts.values())
    rest = _fallback({k: v for k, v in overrides.items() if k not in counts}, {k: literal_value(k) for k in overrides}, step)
    out = {k: counts.get(k, (rest or overrides).get(k)) for k in overrides}
    return None if out == overrides else out


def describe(overrides: dict) -> str:
    """``batch_size=47, dim=767``; a literal's change as ``16->11``, the file's literal sizes named as such."""
    text = ", ".join(f"{literal_value(k)}->{v}{' (its first)' * ('@' in k)}" if is_literal(k)
                     else f"{k}={tuple(v) if isinstance(v, list) else v}"  # JSON made it a list
                     for k, v in overrides.items() if not is_literal(k) or v != literal_value(k))  # a kept literal: no change
    return f"{text} (literal sizes)" if overrides and all(is_literal(k) for k in overrides) else text
