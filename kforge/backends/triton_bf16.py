"""Triton's interpreter made to compute bfloat16 by value, as a GPU does (installed by `TritonBackend.prepare` in a
worker that runs the interpreter, before any candidate code).

The interpreter keeps a bfloat16 tensor as its uint16 bit pattern, and its arithmetic runs numpy on that storage:
a bf16 ``tl.dot`` multiplies bit patterns (values near 1e10 for inputs in [-2, 2]), ``a + b`` adds them, and
``tl.max`` orders them as unsigned integers. Triton documents this as unsupported (its debugging guide: "use
tl.cast to convert the tensor to float32"; triton-lang/triton#11584, and the fix in #10945 was not merged), so
without this a correct bf16 kernel verified with ``--backend triton --device cpu --precision bf16`` came out
``numerical_mismatch``. Here each such operation takes its bf16 operands as float32, computes, and rounds a bf16
result back to nearest even; ``tl.dot`` accumulates in its accumulator's dtype (float32), as tensor cores do.

A float32 ``tl.dot`` is TF32 on a GPU unless the kernel asks for ``input_precision="ieee"``: its operands lose 13
mantissa bits, and at a float32 tolerance a matrix product of any length fails. The interpreter computed it exactly,
so such a kernel was ``correct`` on CPU and a mismatch on a GPU; here its operands are rounded to TF32 first
(`to_tf32`), as the tensor cores take them.

Only the interpreter's methods that exist are wrapped (they move between Triton versions); a version that
computes bf16 by value itself is wrapped harmlessly: float32 operands pass through untouched.
"""

from __future__ import annotations

import functools

import numpy as np

_COMPARISONS = {np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal}


def to_float32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) as float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bf16, ties to even, as uint16 bit patterns (NaN stays NaN)."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    return np.where(np.isnan(values), np.uint32(0x7FC0), rounded).astype(np.uint16)


def to_tf32(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32's 10 mantissa bits, to nearest with ties away from zero (``cvt.rna.tf32.f32``,
    what a GPU's tensor cores are given for a float32 ``tl.dot``); infinities and NaN stay as they are."""
    values = np.asarray(values, dtype=np.float32)
    rounded = ((values.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(values), rounded, values)


def _tf32(args: tuple, kwargs: dict) -> bool:
    """Whether a ``create_dot`` call asks for TF32 inputs: ``tl.dot``'s default for float32 on NVIDIA GPUs, unless
    ``input_precision="ieee"`` (or ``allow_tf32=False``, or ``"tf32x3"``, which is float32-accurate)."""
    precision = kwargs.get("input_precision", args[0] if args else None)
    return getattr(precision, "name", str(precision)).upper() == "TF32"


def install() -> bool:
    """Wrap the interpreter's arithmetic for bf16 operands; False where there is no interpreter to wrap."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter as interp
    except ImportError:
        return False
    builder = getattr(interp, "InterpreterBuilder", None)
    if builder is None or getattr(builder, "_kforge_bf16", False):
        return builder is not None
    bf16, f32 = tl.bfloat16, tl.float32
    handle = interp.TensorHandle

    def is_bf16(h) -> bool:
        return getattr(getattr(h, "dtype", None), "scalar", None) == bf16

    def widen(h):
        return handle(to_float32(h.data), f32) if is_bf16(h) else h

    def narrow(h):
        return handle(to_bf16(h.data), bf16)

    def wrap(name: str, make):
        original = getattr(builder, name, None)
        if callable(original):
            setattr(builder, name, functools.wraps(original)(make(original)))

    def binary(original):
        def binary_op(self, lhs, rhs, op):
            if not (is_bf16(lhs) or is_bf16(rhs)):
                return original(self, lhs, rhs, op)
            out = original(self, widen(lhs), widen(rhs), op)
            return out if op in _COMPARISONS else narrow(out)
        return binary_op

    def unary(original):
        def unary_op(self, arg, op):
            return narrow(original(self, widen(arg), op)) if is_bf16(arg) else original(self, arg, op)
        return unary_op

    def ternary(original):
        def ternary_op(self, lhs, rhs, other, op):
            if op is np.where or not any(is_bf16(h) for h in (lhs, rhs, other)):  # a select moves bits: exact
                return original(self, lhs, rhs, other, op)
            out = original(self, widen(lhs), widen(rhs), widen(other), op)
            return narrow(out) if is_bf16(other) else out
        return ternary_op

    def fma(original):
        def create_fma(self, x, y, z):
            if not any(is_bf16(h) for h in (x, y, z)):
                return original(self, x, y, z)
            out = original(self, widen(x), widen(y), widen(z))
            return narrow(out) if is_bf16(z) else out
        return create_fma

    def dot(original):
        def create_dot(self, a, b, d, *args, **kwargs):
            if _tf32(args, kwargs) and all(getattr(h.dtype, "scalar", h.dtype) == f32 for h in (a, b)):
                a, b = handle(to_tf32(a.data), f32), handle(to_tf32(b.data), f32)  # as a GPU's tensor cores take them
            if not any(is_bf16(h) for h in (a, b, d)):
                return original(self, a, b, d, *args, **kwargs)
            out = original(self, widen(a), widen(b), widen(d), *args, **kwargs)
            return narrow(out) if is_bf16(d) else out
        return create_dot

    wrap("binary_op", binary)
    wrap("unary_op", unary)
    wrap("ternary_op", ternary)
    wrap("create_fma", fma)
    wrap("create_dot", dot)
    _wrap_reductions(interp, tl)
    builder._kforge_bf16 = True
    return True


def _wrap_reductions(interp, tl) -> None:
    """The reductions and scans numpy runs on the storage directly: max and min (with their indices), sum,
    cumsum, cumprod (the scans of any floating dtype: `_by_value`)."""
    reduce_ops = getattr(interp, "ReduceOps", None)
    min_max = getattr(reduce_ops, "min_max", None)
    if callable(min_max):
        @functools.wraps(min_max)
        def by_value_min_max(self, input, val_reduce_op, idx_reduce_op=None):
            value = input[0] if isinstance(input, tuple) else input
            if value.dtype != tl.bfloat16:
                return min_max(self, input, val_reduce_op, idx_reduce_op)
            out = min_max(self, self.to_tensor(to_float32(value.handle.data), tl.float32), val_reduce_op,
                          idx_reduce_op)
            return tuple(_narrowed(self, t, tl) for t in out) if isinstance(out, tuple) else _narrowed(self, out, tl)
        reduce_ops.min_max = by_value_min_max
    for cls_name, method, fn in (("ReduceOps", "sum", np.sum), ("ScanOps", "cumsum", np.cumsum),
                                 ("ScanOps", "cumprod", np.cumprod)):
        cls = getattr(interp, cls_name, None)
        original = getattr(cls, method, None)
        if callable(original):
            setattr(cls, method, _by_value(original, fn, tl))


def _narrowed(ops, t, tl):
    """A float32 result of a reduction on widened bf16 values, back in bf16 (an index stays as it is)."""
    if t.dtype != tl.float32:
        return t
    data = to_bf16(t.handle.data)
    return ops.to_tensor(data if t.type.is_block() else data.reshape(-1)[0], tl.bfloat16)


def _by_value(original, fn, tl):
    """``ReduceOps.sum`` or a scan: on bf16 input, numpy's ``fn`` over the float32 values, rounded back. A scan of
    floating values runs in float64: the interpreter's ``np.cumsum`` adds in the input's dtype one element after
    another, an error growing with the row's length, while a GPU's scan is a tree whose error grows with its log
    (a float32 ``tl.cumsum`` over 4,000 columns failed 1e-4 on CPU in two runs of three, right on a GPU)."""
    scan = fn is not np.sum

    @functools.wraps(original)
    def method(self, input):
        floating = input.dtype in (tl.float16, tl.float32, tl.bfloat16)
        if input.dtype != tl.bfloat16 and not (scan and floating):
            return original(self, input)
        extra = {"keepdims": self.keep_dims} if not scan else {}
        data = to_float32(input.handle.data) if input.dtype == tl.bfloat16 else input.handle.data
        out = fn(data.astype(np.float64) if scan else data, axis=self.axis, **extra)
        out = to_bf16(out.astype(np.float32)) if input.dtype == tl.bfloat16 else out.astype(input.handle.data.dtype)
        out = self.to_tensor(out, input.dtype)
        return [out] if scan else out
    return method
