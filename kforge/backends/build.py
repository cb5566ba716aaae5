"""A caching, faster ``torch.utils.cpp_extension.load_inline`` and ``load`` for candidates' C++/CUDA extensions.

Installed in the worker process before a candidate is imported, so a KernelBench-style candidate that
calls ``load_inline`` (or writes its sources to files and calls ``load``) gets:

* a persistent build cache keyed by (sources, every build argument, torch version, CUDA version,
  target arch, compiler, this recipe's version): re-verifying the same source loads the built ``.so``
  directly (milliseconds) instead of rebuilding. Source files count by basename and contents, not by
  path: each verification phase runs in its own directory, so its run phase finds what its build phase
  built instead of compiling again on the GPU slot;
* a precompiled ``torch/extension.h`` (GCC PCH) per set of compile flags, kept in the cache, for the
  C++ binding file that every extension has;
* that header tried first without torch's C++ frontend (`kforge.backends.header`), which saves a third
  of a build: a source that compiles without it means the same with it, and one that does not is built
  again as torch builds it, whose result and compiler log are the ones reported;
* a ``.cu`` file without torch headers when the CUDA source (inline) uses none (``torch/types.h``
  dominates nvcc's time): one-shot examples keep torch types in the C++ part to benefit;
* one lock per build, so parallel build processes never build the same thing twice or collide.

A build failure raises `CompilationError` carrying the compiler's output, and a last line naming the likely
cause where `kforge.backends.diagnose` recognises it.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from ..cachefile import locked
from ..errors import KforgeError
from .diagnose import CAUSE_PREFIX, likely_cause
from .header import PrecompiledHeaders

RECIPE_VERSION = 3
_TORCH_SYMBOLS = re.compile(r"\bat::|\btorch\b|\bc10\b|\bATen\b|\bTORCH_|\bAT_|\bC10_|\bTensor\b")
# Arguments that do not change what is built.
_NOT_IN_KEY = {"verbose", "build_directory", "keep_intermediates"}


#: Compiler errors no declaration can cure. Torch's full header only adds declarations to the light one: a name
#: it would declare shows in the light build as an undeclared name ("was not declared", "is not a member", nvcc's
#: "is undefined"), never as these alone; what is defined twice on the light header is on the full one too; and
#: both builds search the same include paths, so a header missing from one is missing from the other.
_HEADER_INDEPENDENT = re.compile(
    r"expected [‘'][;,)\]}][’'] (?:before |at end of input)|stray [‘'].+[’'] in program"  # ‘’ or '' by locale
    r"|missing terminating . character|unterminated comment|redefinition of [‘']|.+: No such file or directory$"
    r"|for statement expected before "  # an `omp for` with no loop after it: a pragma GCC moved (diagnose.py)
    r'|expected an? "[;,)\]}]"$|.*\bhas already been defined$|cannot open source file ')  # nvcc's words
# file:line:col: (GCC) or file(line): (nvcc, whose errors may carry a number: "error #65-D:")
_COMPILER_ERROR = re.compile(
    r"^\S.*(?::\d+:\d+:|\(\d+\):) (?:fatal |catastrophic )?error(?: #\d+-D)?: (.*)$")
_ANY_ERROR = re.compile(r"\berror(?: #\d+-D)?:")
_SOURCE_ECHO = re.compile(r"^\s*\d*\s*\|")  # GCC's quote of the offending line, which may say "error:" itself


def header_independent(log: str) -> bool:
    """Whether a failed build's log holds compiler errors and every one is one that no header cures
    (`_HEADER_INDEPENDENT`): a missing semicolon, a stray character, a function defined twice in one file, a header
    that is not there, from GCC or nvcc. Link errors (a module defined in two files, say) and anything else say no."""
    errors = [ln for ln in log.splitlines() if _ANY_ERROR.search(ln) and not _SOURCE_ECHO.match(ln)]
    return bool(errors) and all((m := _COMPILER_ERROR.match(ln)) and _HEADER_INDEPENDENT.match(m.group(1))
                                for ln in errors)


class CompilationError(KforgeError, RuntimeError):
    """The candidate's extension did not build; ``log`` holds the compiler's words."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


def _compiler_version() -> str:
    cxx = os.environ.get("CXX", "c++")
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout or cxx
    except (OSError, subprocess.SubprocessError):
        return cxx


def compiler_line() -> str:
    """The compiler's version line, as the build cache keys by it."""
    version = _compiler_version()
    return version.splitlines()[0] if version else ""


class Builder:
    """Builds and caches extensions; `install` swaps it in for torch's ``load_inline`` and ``load``."""

    def __init__(self, cache_root: str | os.PathLike, *, arch: str | None = None, use_pch: bool = True,
                 torch_free_cu: bool = True, light_header: bool = True):
        import torch
        import torch.utils.cpp_extension as ce
        self.root = Path(cache_root)
        self.arch = arch
        self.use_pch = use_pch and sys.platform.startswith("linux")
        self.torch_free_cu = torch_free_cu
        self.light_header = light_header
        self._ce = ce
        self._real_load_inline = ce.load_inline
        self._accepted = set(inspect.signature(ce.load_inline).parameters)
        self._real_load = ce.load
        self._load_params = list(inspect.signature(ce.load).parameters)
        version = _compiler_version()
        self._is_gcc = "Free Software Foundation" in version and "clang" not in version.lower()
        self._env = {"torch": torch.__version__, "cuda": torch.version.cuda, "arch": arch,
                     "cxx": version.splitlines()[0] if version else "", "python": sys.version.split()[0],
                     "recipe": RECIPE_VERSION}
        self.headers = PrecompiledHeaders(self.root, self._env, self._is_gcc)
        self.built: list[str] = []
        """Build directories this process compiled (not cache hits), for reporting."""
        self.hits: list[str] = []
        self.failed: dict[str, str] = {}
        """Build key -> compiler log of each build that failed here, whether or not the candidate caught it."""
        self.known_failures: dict[str, str] = {}
        """Build key -> compiler log of builds that failed earlier in this verification (its build phase):
        they fail again at once instead of compiling again (the same source, flags and toolchain)."""

    # -- public -----------------------------------------------------------------------------------
    def install(self) -> None:
        self._ce.load_inline = self.load_inline
        self._ce.load = self.load
        if self.arch:
            os.environ["TORCH_CUDA_ARCH_LIST"] = self.arch

    def key(self, name: str, cpp_sources: Any, cuda_sources: Any, kwargs: dict[str, Any]) -> str:
        return self._digest({"name": name, "cpp": _as_list(cpp_sources), "cuda": _as_list(cuda_sources)}, kwargs)

    def file_key(self, name: str, sources: list[str], kwargs: dict[str, Any]) -> str:
        """The key of a build from files: each source by its basename and contents (with the local headers it
        includes), not by its path, so the same files written into another directory (each verification
        phase has its own) find the build."""
        files = []
        for path in sources:
            text = _read(path)
            files.append([os.path.basename(path), _sha(text), _local_headers(path, text)])
        # An include path that is a source's own directory (a model's temporary one) counts by its headers.
        dirs = {os.path.realpath(os.path.dirname(os.path.abspath(p))) for p in sources}
        includes = [_headers_in(inc) if os.path.realpath(str(inc)) in dirs else inc
                    for inc in _as_list(kwargs.get("extra_include_paths"))]
        return self._digest({"name": name, "files": files}, dict(kwargs, extra_include_paths=includes))

    def _digest(self, payload: dict[str, Any], kwargs: dict[str, Any]) -> str:
        """``payload`` with the build arguments that matter and the toolchain, hashed."""
        payload = dict(payload, kw={k: v for k, v in sorted(kwargs.items()) if k not in _NOT_IN_KEY}, env=self._env)
        blob = json.dumps(payload, sort_keys=True, default=repr)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def load_inline(self, name: str, cpp_sources: Any, cuda_sources: Any = None, **kwargs: Any):
        key = self.key(name, cpp_sources, cuda_sources, kwargs)
        return self._cached(key, name, kwargs, lambda build_dir: self._build(build_dir, name, cpp_sources,
                                                                             cuda_sources, kwargs))

    def load(self, name: str, sources: Any, *args: Any, **kwargs: Any):
        """Torch's ``load`` (extension source files), cached like `load_inline`; the candidate's
        ``build_directory`` is replaced by the cache's."""
        kwargs.update(zip(self._load_params[2:], args))  # torch's parameters may be passed by position
        paths = [os.fspath(p) for p in ([sources] if isinstance(sources, (str, os.PathLike)) else sources)]
        key = self.file_key(name, paths, kwargs)  # a missing source raises here, as in torch's load
        def build(build_dir: Path, light: bool):
            return self._run_build(build_dir, name, self._real_load, set(self._load_params),
                                   self._with_pch(kwargs, light), sources=paths)
        return self._cached(key, name, kwargs, lambda build_dir: self._first_that_builds(
            lambda: build(build_dir, True), lambda: build(build_dir, False), differ=self._light_ok()))

    # -- internals --------------------------------------------------------------------------------
    def _cached(self, key: str, name: str, kwargs: dict[str, Any], build: Callable[[Path], Any]):
        """The one path of every loader: a build known to fail fails at once; otherwise, under the key's lock
        (parallel workers never build the same thing twice), the cached module or ``build(build_dir)``."""
        build_dir = self.root / "builds" / key
        if key in self.known_failures:
            self.failed[key] = self.known_failures[key]
            raise CompilationError(self.known_failures[key])
        with locked(self.root / "builds" / f"{key}.lock"):
            module = self._load_cached(build_dir, name, kwargs)
            if module is not None:
                self.hits.append(str(build_dir))
                return module
            try:
                module = build(build_dir)
            except CompilationError as exc:
                self.failed[key] = exc.log
                raise
            self.built.append(str(build_dir))
            return module

    def _load_cached(self, build_dir: Path, name: str, kwargs: dict[str, Any]):
        marker = build_dir / "kforge_ok.json"
        if not marker.is_file():
            return None
        info = json.loads(marker.read_text())
        so, name = Path(info["so"]), info.get("name", name)
        if not so.is_file():
            return None
        if not kwargs.get("is_python_module", True):
            import torch
            torch.ops.load_library(str(so))
            return str(so)
        loader = importlib.machinery.ExtensionFileLoader(name, str(so))
        spec = importlib.util.spec_from_file_location(name, str(so), loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module

    def _build(self, build_dir: Path, name: str, cpp_sources: Any, cuda_sources: Any, kwargs: dict[str, Any]):
        cpp, cuda = _as_list(cpp_sources), _as_list(cuda_sources)
        tuned = dict(kwargs)
        if (self.torch_free_cu and cuda and not kwargs.get("no_implicit_headers")
                and "no_implicit_headers" in self._accepted and not any(_TORCH_SYMBOLS.search(s) for s in cuda)):
            # Same program, but nvcc no longer parses torch's headers for a .cu that does not use them.
            tuned["no_implicit_headers"] = True
            cpp = ["#include <torch/extension.h>"] + cpp
            cuda = ["#include <cuda.h>", "#include <cuda_runtime.h>"] + cuda

        def build(kw: dict[str, Any], cpp: list[str], cuda: list[str]):
            return self._run_build(build_dir, name, self._real_load_inline, self._accepted, kw,
                                   cpp_sources=cpp, cuda_sources=cuda or None)
        return self._first_that_builds(
            lambda: build(self._with_pch(tuned, light=True), cpp, cuda),
            lambda: build(self._with_pch(kwargs), _as_list(cpp_sources), _as_list(cuda_sources)),
            differ=tuned != kwargs or self._light_ok())

    @staticmethod
    def _first_that_builds(faster: Callable[[], Any], torchs: Callable[[], Any], differ: bool):
        """``faster()`` (the light header, a torch-free ``.cu``) where it ``differ``s from ``torchs()``, the build as
        torch makes it; where ``faster()`` does not build, ``torchs()``, whose result and log are the verdict's,
        unless every error ``faster()`` met is one that no header cures (`header_independent`): then its own."""
        if differ:
            try:
                return faster()
            except CompilationError as exc:
                if header_independent(exc.log):
                    raise
        return torchs()

    def _light_ok(self) -> bool:
        """Whether builds get the light header first: on (the backend option ``light_header``), GCC with
        precompiled headers on, and torch's headers laid out as `PrecompiledHeaders.light_includes` expects."""
        return self.light_header and self.use_pch and self._is_gcc and bool(self.headers.light_includes())

    def _with_pch(self, kwargs: dict[str, Any], light: bool = False) -> dict[str, Any]:
        """``kwargs`` with the precompiled torch/extension.h (the light one where ``light``) first on the include
        path, where one can be had."""
        light = light and self._light_ok()
        pch_dir = self.headers.ensure(list(kwargs.get("extra_cflags") or []), light) if self.use_pch else None
        if pch_dir is None:
            return kwargs
        return {**kwargs, "extra_include_paths": [str(pch_dir)] + list(kwargs.get("extra_include_paths") or [])}

    def _run_build(self, build_dir: Path, name: str, real: Callable, accepted: set[str], kwargs: dict[str, Any],
                   **sources: Any):
        """Torch's own ``real`` loader, building into ``build_dir``; marks the build done for `_load_cached`."""
        shutil.rmtree(build_dir, ignore_errors=True)
        build_dir.mkdir(parents=True)
        kwargs = {k: v for k, v in kwargs.items() if k in accepted and k not in _NOT_IN_KEY}
        try:
            module = real(name=name, **sources, build_directory=str(build_dir), verbose=False, **kwargs)
        except Exception as exc:  # torch raises RuntimeError with ninja's output; keep all of it
            log = _clean_log(str(exc))
            cause = likely_cause(log, _texts(sources), _as_list(kwargs.get("functions")))
            raise CompilationError(log + (f"\n{CAUSE_PREFIX}{cause}" if cause else "")) from None
        so = build_dir / f"{name}.so"
        if not so.is_file():
            found = sorted(build_dir.glob("*.so"))
            so = found[0] if found else so
        (build_dir / "kforge_ok.json").write_text(json.dumps({"so": str(so), "name": so.stem}))
        return module

def _read(path: str) -> bytes:
    """A source's bytes; a missing file raises what torch's ``load`` raises (it opens each source alike)."""
    with open(path, "rb") as fh:
        return fh.read()


def _sha(data: bytes) -> str:
    """Contents enter the key by hash: they may be large, or not text."""
    return hashlib.sha256(data).hexdigest()


_LOCAL_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def _local_headers(source: str, text: bytes) -> dict[str, str]:
    """Path (relative to the source's directory) -> hash of each ``#include "..."`` file found beside its
    includer, transitively: torch compiles the source where it lies, so these are part of what is built."""
    base = os.path.dirname(os.path.abspath(source))
    found: dict[str, str] = {}
    todo = [(base, text)]
    while todo:
        where, text = todo.pop()
        for inc in _LOCAL_INCLUDE.findall(text):
            path = os.path.normpath(os.path.join(where, inc.decode(errors="replace")))
            rel = os.path.relpath(path, base)
            if rel not in found and os.path.isfile(path):
                data = _read(path)
                found[rel] = _sha(data)
                todo.append((os.path.dirname(path), data))
    return found


def _headers_in(folder: str) -> dict[str, str]:
    """Name -> hash of each header in ``folder``, standing in for its path in a build's key."""
    return {n: _sha(_read(os.path.join(folder, n))) for n in sorted(os.listdir(folder))
            if n.endswith((".h", ".hpp", ".cuh", ".hh", ".inl")) and os.path.isfile(os.path.join(folder, n))}


def _as_list(sources: Any) -> list[str]:
    if not sources:
        return []
    return [sources] if isinstance(sources, str) else list(sources)


_COMMAND_ECHO = re.compile(r"^(\[\d+/\d+\]\s*)?\S*(c\+\+|g\+\+|gcc|clang\+*|nvcc)\s.*\s-(c|o)\s")


def _texts(sources: dict[str, Any]) -> list[str]:
    """The C++/CUDA text of a build's sources: inline strings as given, ``load``'s files as read."""
    if "sources" in sources:
        return [_read(p).decode(errors="replace") for p in sources["sources"] if os.path.isfile(p)]
    return [t for k in ("cpp_sources", "cuda_sources") for t in _as_list(sources.get(k)) if isinstance(t, str)]


def _clean_log(log: str) -> str:
    """Keep the compiler's words; drop ninja's progress lines and the echoed compiler commands."""
    log = re.sub(r"^Error building extension '([^']*)':\s*", r"error building extension '\1'\n", log)
    lines = [ln for ln in log.splitlines()
             if not _COMMAND_ECHO.match(ln) and not re.match(r"^\[\d+/\d+\] ", ln)]
    return "\n".join(lines).strip()
