"""What a failed build's likely cause is, where the compiler's words hide it: mistakes models make often in
``load_inline`` code, each read from the sources and the log together and said as one line a person or a model
can act on (`likely_cause`). The line ends the build's log (`CAUSE_PREFIX`), which the verdict's message repeats.
"""

from __future__ import annotations

import re

#: How the cause's line starts in a build log (`kforge.backends.build.CompilationError`).
CAUSE_PREFIX = "kforge: likely cause: "

_MACRO_CALL = re.compile(r"\b([A-Z][A-Z0-9_]{2,})\s*\(")
_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+([^\n]*)", re.MULTILINE)
# GCC quotes names with ‘’ (or '' in the C locale); nvcc's host compiler is GCC too.
_NOT_A_TYPE = re.compile(r"error: [‘']__global__[’'] does not name a type")
_UNDECLARED = re.compile(r"^\S*main\.cpp:\d+:\d+: error: [‘']([A-Za-z_]\w*)[’'] was not declared in this scope",
                         re.MULTILINE)


def _pragma_in_macro(source: str) -> tuple[str, str] | None:
    """The first ``#pragma`` written inside a macro call's arguments (``AT_DISPATCH_FLOATING_TYPES(..., [&] {
    #pragma omp parallel for ...})``), as (the macro, the pragma); None if there is none. Directives inside a
    macro's arguments are undefined in C++; GCC moves the pragma out of the lambda, and ``omp for`` then finds no
    loop ("for statement expected before '[' token", in torch's own header)."""
    pragmas = [(m.start(), m.group(1).strip()) for m in _PRAGMA.finditer(source)]
    if not pragmas:
        return None
    for call in _MACRO_CALL.finditer(source):
        depth, end = 0, None
        for i in range(call.end() - 1, len(source)):
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            if depth == 0:
                end = i
                break
        inside = [p for at, p in pragmas if call.end() <= at < (end if end is not None else len(source))]
        if inside:
            return call.group(1), inside[0]
    return None


def likely_cause(log: str, sources: list[str], functions: list[str]) -> str | None:
    """One line naming the likely cause of a failed build, or None where none of the mistakes below explains it.

    - a CUDA kernel (``__global__``) given to the host C++ compiler: in ``cpp_sources``, or on the cpu backend;
    - a ``#pragma`` inside a macro's arguments (`_pragma_in_macro`) where the compiler found no loop after an
      ``omp for``: GCC moved the pragma out of the lambda;
    - a name in ``load_inline``'s ``functions=`` that the C++ sources never declare: the binding torch writes into
      ``main.cpp`` (``m.def("forward", ...)``) sees only ``cpp_sources``, not the ``.cu`` compiled apart.
    """
    if " error" not in log and "error:" not in log:
        return None
    if _NOT_A_TYPE.search(log):
        return ("a CUDA kernel (`__global__`) reached the host C++ compiler, which knows neither it nor `<<<...>>>` "
                "launches: with load_inline, CUDA code goes in cuda_sources (compiled by nvcc, on the cuda backend) and "
                "cpp_sources holds only the C++ declarations of the functions it binds.")
    for source in sources if "for statement expected" in log else ():
        found = _pragma_in_macro(source)
        if found:
            macro, pragma = found
            return (f"`#pragma {pragma}` is written inside the arguments of the macro {macro}(...); C++ leaves "
                    f"directives there undefined and GCC moves it out of the lambda. Move the loop into a function the "
                    f"lambda calls, or write it as `_Pragma(\"{pragma}\")`.")
    missing = [name for name in dict.fromkeys(_UNDECLARED.findall(log)) if name in functions]
    if missing:
        names = ", ".join(f"`{n}`" for n in missing)
        return (f"{names} in load_inline's functions= {'is' if len(missing) == 1 else 'are'} not declared in "
                f"cpp_sources: torch binds those names in main.cpp, which holds cpp_sources alone (a .cu is compiled "
                f"apart); declare each there, e.g. cpp_sources=\"torch::Tensor {missing[0]}(torch::Tensor x);\" with "
                f"its real parameters.")
    return None


def cause_in(log: str | None) -> str | None:
    """The likely cause a build's log ends with (`CAUSE_PREFIX`), or None."""
    last = (log or "").rstrip().rsplit("\n", 1)[-1]
    return last[len(CAUSE_PREFIX):] if last.startswith(CAUSE_PREFIX) else None
