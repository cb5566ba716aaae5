"""libdevice's math under Triton's interpreter (installed by `TritonBackend.prepare` in a worker that runs the
interpreter, before any candidate code).

Models reach for ``from triton.language.extra import libdevice`` (or ``...extra.cuda``) for what ``tl`` lacks: a
GELU's ``libdevice.tanh`` or ``libdevice.erf``, ``libdevice.pow``. Triton's interpreter implements none of it (its
builder raises "extern_elementwise not supported in interpreter mode", and the generic stubs return None), so such
a kernel, correct on a GPU, was a ``runtime_error`` on CPU. Here the floating-point math functions of both modules
compute with NumPy (torch for the special functions), in float32 or wider, and round back to the operand's dtype
(bf16 through `kforge.backends.triton_bf16`'s by-value conversion). The rounding-mode variants (``add_rd``...),
integer bit tricks and predicates stay as Triton has them: models rarely write them, and ``tl`` has its own.

A function called on an operand type it has no GPU version for (``libdevice.tanh`` on bf16 values: float32 and
float64 only) raises `kforge.backends.triton_limits.RefusedOnGpu`, as Triton's compiler for a GPU refuses it; the
versions are read from Triton's own table (`overloads`), and operands are promoted first as Triton promotes them
(a bf16 value beside a Python float is float32).
"""

from __future__ import annotations

import inspect
import re

import numpy as np

from .triton_bf16 import to_bf16, to_float32
from .triton_limits import RefusedOnGpu

_KEY = re.compile(r"\(((?:\s*core\.dtype\(\"\w+\"\),?\s*)+)\)\s*:")
_RANK = {"fp64": 3, "fp32": 2, "fp16": 1, "bf16": 1}


def overloads(fn) -> set[tuple[str, ...]] | None:
    """The operand types (``("fp32",)``...) a libdevice function has a GPU version for, read from its table in
    Triton's source; None where that cannot be read (then nothing is refused)."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return None
    return {tuple(re.findall(r'dtype\("(\w+)"\)', key)) for key in _KEY.findall(source)} or None


def _refused(name: str, types: tuple[str, ...], allowed: set[tuple[str, ...]]) -> bool:
    """Whether Triton refuses these operand types: not among the versions even once promoted to the widest float
    among them (Triton's arithmetic check runs where the types match no version as given)."""
    if types in allowed:
        return False
    floats = [t for t in types if t in _RANK]
    if not floats:
        return True
    widest = max(floats, key=_RANK.__getitem__)
    return tuple(widest if t in _RANK or t.startswith("int") else t for t in types) not in allowed


def _torch(name: str):
    def f(a: np.ndarray) -> np.ndarray:
        import torch
        return getattr(torch.special, name)(torch.from_numpy(np.ascontiguousarray(a))).numpy()
    return f


def _round_half_away(a):
    return np.sign(a) * np.floor(np.abs(a) + 0.5)


UNARY = {
    "abs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin, "asinh": np.arcsinh,
    "atan": np.arctan, "atanh": np.arctanh, "cbrt": np.cbrt, "ceil": np.ceil, "cos": np.cos, "cosh": np.cosh,
    "cospi": lambda a: np.cos(np.pi * a), "erf": _torch("erf"), "erfc": _torch("erfc"), "erfinv": _torch("erfinv"),
    "exp": np.exp, "exp10": lambda a: np.power(10.0, a), "exp2": np.exp2, "expm1": np.expm1, "floor": np.floor,
    "lgamma": lambda a: _torch("gammaln")(a), "log": np.log, "log10": np.log10, "log1p": np.log1p, "log2": np.log2,
    "nearbyint": np.rint, "normcdf": _torch("ndtr"), "rcp_rn": lambda a: 1.0 / a, "rint": np.rint,
    "round": _round_half_away, "rsqrt": lambda a: 1.0 / np.sqrt(a), "rsqrt_rn": lambda a: 1.0 / np.sqrt(a),
    "saturatef": lambda a: np.clip(a, 0.0, 1.0), "sin": np.sin, "sinh": np.sinh, "sinpi": lambda a: np.sin(np.pi * a),
    "sqrt": np.sqrt, "sqrt_rn": np.sqrt, "tan": np.tan, "tanh": np.tanh, "trunc": np.trunc,
    "tgamma": lambda a: np.exp(_torch("gammaln")(a)) * np.where((a < 0) & (np.floor(a) % 2 == 1), -1.0, 1.0),
    "fast_cosf": np.cos, "fast_exp10f": lambda a: np.power(10.0, a), "fast_expf": np.exp, "fast_log10f": np.log10,
    "fast_log2f": np.log2, "fast_logf": np.log, "fast_sinf": np.sin, "fast_tanf": np.tan, "fast_tanhf": np.tanh,
}
BINARY = {
    "pow": np.power, "fast_powf": np.power, "atan2": np.arctan2, "fmod": np.fmod, "hypot": np.hypot,
    "copysign": np.copysign, "fdim": lambda a, b: np.maximum(a - b, 0.0), "fast_dividef": np.divide,
    "div_rn": np.divide, "add_rn": np.add, "sub_rn": np.subtract, "mul_rn": np.multiply, "nextafter": np.nextafter,
}
TERNARY = {"fma": lambda a, b, c: a * b + c, "fma_rn": lambda a, b, c: a * b + c}


def _elementwise(name: str, fn, allowed: set[tuple[str, ...]] | None = None):
    def call(*args, _semantic=None, _builder=None):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle
        first = next((a for a in args if isinstance(a, tl.tensor)), None)
        if first is None:  # Python numbers: the function's value, as a number
            return float(fn(*[np.float64(getattr(a, "value", a)) for a in args]))
        types = tuple(a.dtype.name if isinstance(a, tl.tensor) else
                      "fp32" if isinstance(getattr(a, "value", a), float) else "int32" for a in args)
        if allowed and _refused(name, types, allowed):
            have = ", ".join("/".join(t) for t in sorted(allowed))
            raise RefusedOnGpu(f"libdevice.{name} has no version for {'/'.join(types)} (it has {have}): Triton's "
                               "compiler for a GPU refuses this call; convert the operands first (x.to(tl.float32))")
        scalar = first.dtype
        wide = np.float64 if scalar == tl.float64 else np.float32

        def value(a):
            if not isinstance(a, tl.tensor):
                return wide(getattr(a, "value", a))
            data = a.handle.data
            return to_float32(data) if a.dtype == tl.bfloat16 else np.asarray(data).astype(wide)

        with np.errstate(all="ignore"):
            out = np.asarray(fn(*[value(a) for a in args]), dtype=wide)
        data = to_bf16(out.astype(np.float32)) if scalar == tl.bfloat16 else out.astype(first.handle.data.dtype)
        shape = list(np.shape(data))
        kind = first.type if shape == list(first.shape) else (tl.block_type(scalar, shape) if shape else scalar)
        return tl.tensor(TensorHandle(data, scalar), kind)
    call.__name__ = name
    return call


def install() -> bool:
    """Replace the math functions of Triton's libdevice modules; False where this Triton has neither."""
    import importlib
    try:  # the GPU's versions of each function, read before any is replaced
        cuda = importlib.import_module("triton.language.extra.cuda.libdevice")
    except ImportError:
        cuda = None
    tables = {name: overloads(getattr(cuda, name)) for table in (UNARY, BINARY, TERNARY) for name in table
              if cuda is not None and hasattr(cuda, name) and not getattr(cuda, "_kforge_numpy", False)}
    done = False
    for path in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice"):
        try:
            mod = importlib.import_module(path)
        except ImportError:
            continue
        if getattr(mod, "_kforge_numpy", False):
            done = True
            continue
        for table in (UNARY, BINARY, TERNARY):
            for name, fn in table.items():
                if hasattr(mod, name):
                    setattr(mod, name, _elementwise(name, fn, tables.get(name)))
        mod._kforge_numpy = done = True
    return done
