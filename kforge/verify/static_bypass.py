"""The ``dispatcher_bypass`` rule: C++ that calls PyTorch's own kernels past its dispatcher.

``at::cpu::mm``, ``at::cuda::`` ops from their ``*_dispatch.h`` headers, ``at::compositeexplicitautograd::``,
``at::native::`` implementations and a redispatch (``at::_ops::mm::redispatch``) run PyTorch's kernels without an
``aten::`` event: the profiler and the traced dispatch mode see the extension's own call and nothing inside it, so
PyTorch's work counted as the candidate's (a GEMM returned by ``at::cpu::mm`` was `correct` with a 99.99% kernel
share). ``torch::mm`` goes through the dispatcher, and the run measures it. Registered on import by
`kforge.verify.static`, beside `kforge.verify.static_rules`.
"""

from __future__ import annotations

import ast
import re

from ..backends import Backend
from ..problems import Problem
from .findings import Finding, rule
from .static_ast import strings

#: Headers that declare PyTorch's per-backend kernels as plain functions, or calls that skip the profiler's hook.
BYPASS_HEADER = re.compile(r"#\s*include\s*[<\"]ATen/(?:ops/\w+_(?:cpu|cuda|meta|compositeexplicitautograd\w*|"
                           r"compositeimplicitautograd\w*)_dispatch\.h|(?:CPU|CUDA|Meta|CompositeExplicitAutograd\w*|"
                           r"CompositeImplicitAutograd\w*)Functions(?:_inl)?\.h|RedispatchFunctions\.h)[>\"]")
_KERNEL_NAMESPACES = r"(?:cpu|meta|compositeexplicitautograd\w*|compositeimplicitautograd\w*)"
#: Calls into those namespaces (not ``at::cpu``'s CPU-feature helpers, ``is_avx2_supported``, ``get_cpu_capabilities``;
#: ``at::cuda::`` is left to its headers: its streams and guards are the CUDA backend's), aliases of them, and a
#: redispatch, which the dispatcher runs without the profiler's record (``at::_ops::mm::redispatch``).
BYPASS_CALL = re.compile(rf"\bat::{_KERNEL_NAMESPACES}::(?!is_|init_|get_|L\d)\w+|"
                         rf"\bnamespace\s+\w+\s*=\s*(?:::)?at::{_KERNEL_NAMESPACES}\b|"
                         rf"\busing\s+namespace\s+(?:::)?at::{_KERNEL_NAMESPACES}\b|"
                         r"\bat::_ops::\w+::redispatch\b|\bat::redispatch::\w+|\.redispatch(?:Boxed)?\s*[<(]")
NATIVE_CALL = re.compile(r"\bat::native::(\w+)\s*\(")
#: Stems of the operators problems are made of, for ``at::native::`` calls where the problem declares no ``ops``
#: (KernelBench's files): ``at::native::softmax_cpu``, ``at::native::addmm_out``; its helpers (``gpu_kernel``,
#: ``resize_output``, ``canUse32BitIndexMath``) name none.
OPERATOR_STEMS = ("mm", "matmul", "linear", "conv", "softmax", "relu", "gelu", "silu", "sigmoid", "tanh", "norm",
                  "pool", "sum", "mean", "cumsum", "cumprod", "argmax", "argmin", "max", "min", "exp", "log",
                  "dropout", "attention", "embedding", "clamp", "hardtanh", "elu", "where", "scatter", "gather")


@rule("dispatcher_bypass")
def _dispatcher_bypass(tree: ast.Module, source: str, backend: Backend, problem: Problem | None) -> list[Finding]:
    ops = set(problem.ops) if problem and problem.ops else set(OPERATOR_STEMS)
    for text in strings(tree):
        found = BYPASS_HEADER.search(text) or BYPASS_CALL.search(text)
        if found is None:  # at::native's helpers (block reductions, loops) build kernels of one's own; its
            # implementations of the problem's operators are PyTorch's
            found = next((m for m in NATIVE_CALL.finditer(text) if _names_an_operator(m.group(1), ops)), None)
        if found is not None:
            what = found.group(0).strip().rstrip("(").strip()
            return [Finding("dispatcher_bypass", f"the C++ source uses `{what}`: PyTorch's own kernel called past its "
                            "dispatcher, where no profiler can tell its work from the candidate's; write the "
                            "kernel, or call the operator as torch::... so the run measures whose work it is")]
    return []


def _names_an_operator(function: str, ops: set[str]) -> bool:
    """Whether a word of the function's name (``softmax_cpu``: ``softmax``, ``cpu``) begins or ends with one of
    ``ops`` (``addmm``, ``max_pool2d``, ``conv2d``)."""
    words = function.lower().split("_")
    return any(w.startswith(op) or w.endswith(op) for w in words if w for op in ops)
