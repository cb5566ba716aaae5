"""Where a candidate may write files: its work directory, temporary and build directories, nothing of kforge's.

Models write their kernel sources to a file and build them with ``cpp_extension.load``, or put a build
directory under ``~/.cache``; the static ``environment`` rule lets that through. What it cannot tell from
the source is *where* a write lands, and a write into kforge's own modules, its cache (kept compile-reference
timings, audits, device ceilings) or another candidate's work directory would reach later verdicts. So a
worker installs this guard (a ``sys.addaudithook``, which no Python code can remove) before candidate code
loads: a write, rename, removal or new directory made while the candidate's file is on the Python stack must
land in

* the candidate's own work directory (its current directory),
* the temporary directory, ``~/.cache`` (``XDG_CACHE_HOME``), or a library's own kernel cache in the home
  directory (`LIBRARY_CACHES`: Triton's ``~/.triton``, CuPy's ``~/.cupy``, the CUDA driver's ``~/.nv``),
* the build cache's ``builds/`` and ``pch/`` (where kforge's own builder puts the candidate's extensions),
  and the build and kernel caches the environment names (`NAMED_CACHES`: ``TORCH_EXTENSIONS_DIR``,
  ``TRITON_CACHE_DIR``, ``CUPY_CACHE_DIR``, ``CUDA_CACHE_PATH``, the DSL backends' ``TILELANG_CACHE_DIR`` and
  ``CUTE_DSL_CACHE_DIR``, ...) wherever they point (where torch,
  Triton, CuPy and the driver keep what they build for the candidate),

and never under kforge's package or data directory, the Python installation, kforge's cache outside those
build folders, or the worker pool's other work directories. Anything else is refused with PermissionError
and remembered; the harness then calls the candidate a cheat (rule ``environment``), whatever else it did.

The harness's own writes (timings, audits) have no candidate frame on the stack and are not judged, nor are
those of kforge's builder when the candidate calls ``load_inline`` (it chooses where they land). A
``__pycache__`` write (the import system caching bytecode for a module the candidate imports) is refused
without blame: the import goes on from source, and a forged ``.pyc`` of kforge's cannot land. Writes made
from C++ (``fopen`` in an extension) are not seen by audit hooks, nor is the directory an ``os.open`` with
``dir_fd`` resolves against; the static rules are all there is for those.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from typing import Any

from .tripwire import CANDIDATE_FILE

# Audit events that change the file system: (event, indices of the path arguments).
_PATHS = {"os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,),
          "os.chown": (0,), "os.link": (0, 1), "os.symlink": (1,), "os.truncate": (0,), "os.utime": (0,),
          "shutil.rmtree": (0,), "shutil.move": (0, 1), "shutil.copytree": (1,), "shutil.copyfile": (1,)}
# Where an event's path is relative to a directory descriptor: path index -> dir_fd index.
_DIR_FDS = {"os.rename": {0: 2, 1: 3}, "os.remove": {0: 1}, "os.rmdir": {0: 1}, "os.mkdir": {0: 2}, "os.chmod": {0: 2},
            "os.chown": {0: 3}, "os.symlink": {1: 2}}
# kforge's modules that write on the candidate's behalf, where they decide the path (frames are matched by file).
_TRUSTED_WRITERS = frozenset(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), *parts)
                             for parts in (("backends", "build.py"),))
_TRUSTED_NAMES = tuple(os.sep + os.path.basename(p) for p in _TRUSTED_WRITERS)
# Kernel caches libraries keep in the home directory when the environment names none: a candidate that
# compiles through them writes there (CuPy's RawKernel its cubin, the driver its JIT-compiled PTX).
LIBRARY_CACHES = ("~/.triton", "~/.cupy", "~/.nv")
# Variables that move a build or kernel cache: torch's extensions, Triton's and inductor's caches, CuPy's kernel
# cache, the CUDA driver's JIT cache.
NAMED_CACHES = ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUPY_CACHE_DIR",
                "CUDA_CACHE_PATH", "TILELANG_CACHE_DIR", "CUTE_DSL_CACHE_DIR", "POCL_CACHE_DIR")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _at(path: Any, dir_fd: Any) -> Any:
    """A path given relative to a directory descriptor, made absolute through /proc."""
    if isinstance(dir_fd, int) and dir_fd >= 0 and isinstance(path, (str, bytes)) and not os.path.isabs(path):
        try:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(path))
        except OSError:
            return path
    return path


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


class WriteGuard:
    """Judges each file-system change made with candidate code on the stack (see the module's docstring)."""

    def __init__(self, workdir: str, build_cache: str) -> None:
        from .. import DATA_DIR, PACKAGE_DIR
        self.workdir = _real(workdir)
        cache = _real(build_cache)
        home_cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        self.allowed = [_real(p) for p in (tempfile.gettempdir(), home_cache, *LIBRARY_CACHES, "/dev/null", "/dev/shm")]
        # Build and kernel caches, wherever they are (a user may keep torch's or Triton's inside kforge's cache);
        # read before candidate code runs, so a candidate that sets these variables moves nothing.
        named = [os.environ.get(v) for v in NAMED_CACHES]
        self.builds = [os.path.join(cache, "builds"), os.path.join(cache, "pch")] + [_real(p) for p in named if p]
        store = os.path.dirname(cache)  # kforge keeps its timings, audits and ceilings beside the build cache
        kforge_caches = [p for p in (os.environ.get("KFORGE_CACHE_DIR"), os.path.join(home_cache, "kforge")) if p]
        # The worker pool's other work directories: <pool root>/work/<id> beside this one.
        pool = [os.path.dirname(os.path.dirname(self.workdir))] \
            if os.path.basename(os.path.dirname(self.workdir)) == "work" else []
        paths = sysconfig.get_paths()
        self.kept_out = sorted({_real(p) for p in (
            str(PACKAGE_DIR), str(DATA_DIR), sys.prefix, sys.base_prefix, paths["stdlib"], paths["purelib"],
            paths["platlib"], cache, *kforge_caches, os.path.join(store, "audit"), os.path.join(store, "compile_ref"),
            os.path.join(store, "ceilings.json"), os.path.join(store, "llm"), *pool)})
        self.refused: list[str] = []
        """Paths the candidate tried to change and was refused, in order."""

    def allows(self, path: str) -> bool:
        p = _real(path)
        if _under(p, [self.workdir]) or _under(p, self.builds):
            return True
        if _under(p, self.kept_out):
            return False
        return _under(p, self.allowed)

    def install(self) -> "WriteGuard":
        sys.addaudithook(self._hook)
        return self

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            writes = flags & _WRITE_FLAGS if isinstance(flags, int) else isinstance(mode, str) and \
                any(c in mode for c in "wax+")
            paths = [path] if writes else []
        elif event in _PATHS:
            fds = _DIR_FDS.get(event, {})
            paths = [_at(args[i], args[fds[i]] if fds.get(i, 99) < len(args) else None)
                     for i in _PATHS[event] if i < len(args)]
        else:
            return
        paths = [os.fsdecode(p) for p in paths if isinstance(p, (str, bytes, os.PathLike))]
        if not paths or not _from_candidate():
            return
        for p in paths:
            if not self.allows(p):
                if "__pycache__" not in p:  # the import system caching bytecode: it carries on without
                    self.refused.append(_real(p))
                raise PermissionError(f"kforge: a candidate may not change {p} (only its work directory, temporary "
                                      "and build directories)")

    def finding(self) -> tuple[str, str] | None:
        """(rule, message) once the candidate was refused a write."""
        if not self.refused:
            return None
        more = f" (and {len(self.refused) - 1} more)" if len(self.refused) > 1 else ""
        return "environment", (f"the candidate tried to write {self.refused[0]}{more}: outside its work directory, "
                               "the temporary directory and the build caches")


def _from_candidate() -> bool:
    """Whether the candidate is making this change: its file is on the stack, and no trusted writer of kforge's
    (the builder putting the candidate's extension into the build cache) sits between it and the change."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith(_TRUSTED_NAMES) and os.path.realpath(name) in _TRUSTED_WRITERS:
            return False
        if os.path.basename(name) == CANDIDATE_FILE:
            return True
        frame = frame.f_back
    return False


_GUARD: WriteGuard | None = None


def install_write_guard(workdir: str, build_cache: str) -> WriteGuard:
    """The process's one guard (audit hooks cannot be removed, so a second call returns the first)."""
    global _GUARD
    if _GUARD is None:
        _GUARD = WriteGuard(workdir, build_cache).install()
    return _GUARD
