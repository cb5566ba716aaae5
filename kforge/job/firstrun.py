"""What a long first step is doing, said before it starts.

The first C++ build with a build cache also precompiles torch's ``extension.h`` (GCC, once per set of
flags; kforge/backends/build.py), which takes a minute or more while nothing else is printed. The
callers (``kforge verify``, the pipeline) say so beforehand, from what the cache holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Backends whose candidates are C++ built through kforge's caching builder (which precompiles the header).
COMPILED = ("cpu", "cuda")


def _gcc() -> bool:
    try:
        out = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Free Software Foundation" in out and "clang" not in out.lower()


def pch_pending(backend, build_cache: str | os.PathLike) -> bool:
    """True when this backend's first build will precompile torch's header (none is in the cache yet)."""
    if backend.name not in COMPILED or not backend.options.get("pch", True) or not sys.platform.startswith("linux"):
        return False
    if any((Path(build_cache) / "pch").glob("*/torch/extension.h.gch")):
        return False
    return _gcc()


PCH_NOTICE = ("the first C++ build with this cache also compiles torch's headers once: a minute or two with "
              "nothing printed (later builds skip it)")
