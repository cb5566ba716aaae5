"""What a long first step is doing, said before it starts.

The first C++ build with a build cache also precompiles torch's ``extension.h`` (GCC, once per torch,
compiler and set of flags; kforge/backends/build.py), which takes a minute or more while nothing else is
printed. The callers (``kforge verify``, the pipeline) say so beforehand, from what the cache holds: a
header precompiled for another torch or other flags does not spare this build its own.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

#: Backends whose candidates are C++ built through kforge's caching builder (which precompiles the header).
COMPILED = ("cpu", "cuda")
_CFLAGS = re.compile(r"extra_cflags\s*=\s*(\[[^\]]*\])")


def _gcc() -> bool:
    try:
        out = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Free Software Foundation" in out and "clang" not in out.lower()


def expected_cflags(backend, source: str | None = None) -> list[str]:
    """The ``extra_cflags`` a build will likely pass: the candidate's (``source``), else those of the
    backend's one-shot example, which the prompt shows and most generated kernels copy."""
    if source is None:
        from .. import DATA_DIR
        example = Path(DATA_DIR) / "prompts" / "examples" / backend.name / "model_new.py"
        source = example.read_text() if example.is_file() else ""
    m = _CFLAGS.search(source)
    if not m:
        return []
    try:
        flags = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return []  # flags computed at run time: the header for torch's defaults is the best guess
    return [str(f) for f in flags] if isinstance(flags, list) else []


def builds_cpp(source: str) -> bool:
    """Whether a candidate builds C++ through torch's extension loader (``load_inline`` or ``load``), the
    builds kforge's builder caches; one that calls neither builds nothing."""
    from ..backends.cpu import CpuBackend
    return any(re.search(p, source, re.MULTILINE) for p in CpuBackend.kernel_patterns)


def pch_pending(backend, build_cache: str | os.PathLike, source: str | None = None) -> bool:
    """True when this backend's first build will precompile torch's header: the cache holds none for this
    torch, this compiler and the flags the build will likely use (`expected_cflags`). A ``source`` that
    builds no C++ (`builds_cpp`) compiles no header."""
    if backend.name not in COMPILED or not backend.options.get("pch", True) or not sys.platform.startswith("linux"):
        return False
    if source is not None and not builds_cpp(source):
        return False
    from ..backends.build import compiler_line
    from ..backends.header import FAILED, PCH_STAMP, effective_cflags, pch_stamp
    from ..sandbox.devices import torch_version  # from torch's package metadata: importing torch costs seconds
    want = pch_stamp(torch_version() or "", compiler_line(), effective_cflags(expected_cflags(backend, source)),
                     light=backend.options.get("light_header", True))
    for stamp in (Path(build_cache) / "pch").glob(f"*/{PCH_STAMP}"):
        try:
            have = json.loads(stamp.read_text())
        except (OSError, ValueError):
            continue
        if have == want and ((stamp.parent / "torch" / "extension.h.gch").is_file()
                             or (stamp.parent / FAILED).is_file()):  # refused for these flags: none is made again
            return False
    return _gcc()


PCH_NOTICE = ("the first C++ build with this cache, torch and flags also compiles torch's headers once: a minute "
              "or two with nothing printed (later builds skip it)")
