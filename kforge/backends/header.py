"""``torch/extension.h`` precompiled (a GCC PCH) once per set of compile flags in the build cache, in two forms.

Every extension's C++ binding file includes ``torch/extension.h``; parsing it dominates a build. The builder
(`kforge.backends.build`) puts a directory holding ``torch/extension.h.gch`` first on the include path, so GCC
reads the precompiled state instead. The *light* form leaves out torch's C++ frontend (`LIGHT_DROPS`), a third
of what is left of a build: GCC instantiates, at the end of every file, the templates the header's inline
functions use, which a GCC PCH cannot hold, and the frontend holds many of them. The full form is the header
as torch ships it, for the builds that need it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from ..cachefile import locked

#: What the light ``torch/extension.h`` leaves out: the C++ frontend (``torch/all.h``: nn, optim, data, serialize,
#: jit, fft, special, ...) and what ``torch/python.h`` includes only to bind C++ modules. Their names live in
#: namespaces of their own (``torch::nn``, ``torch::fft``, ...) or are ``using`` declarations of ATen's, and none
#: specialises a pybind11 caster, so a source that compiles without them means the same with them. torch's own
#: ``TORCH_INDUCTOR_CPP_WRAPPER`` mode leaves ``torch/all.h`` out the same way.
LIGHT_DROPS = ("torch/all.h", "torch/nn/module.h", "torch/detail/static.h", "torch/ordered_dict.h")
#: What the light header keeps of ``torch/all.h``: ATen's ``at::parallel_for``, which models' CPU kernels reach for
#: often (without it each such build failed on the light header and was built again on the full one, 2-3x the
#: time); it costs an empty extension about half a second, a real kernel nothing measurable.
LIGHT_KEEPS = ("ATen/Parallel.h",)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.MULTILINE)

#: Beside each precompiled header: the torch, compiler and extra flags it was built for (`pch_stamp`).
PCH_STAMP = "kforge_pch.json"
#: In place of a header the compiler refused to make for its flags: the compiler's words; no build tries it again.
FAILED = "FAILED"


def effective_cflags(extra_cflags: list[str]) -> list[str]:
    """The flags a build's compile command really carries: torch joins ``extra_cflags`` with spaces into its ninja
    file, so an empty one (KernelBench's example passes ``extra_cflags=[""]``, and models copy it) is no flag; given
    to GCC as an argument of its own it is a file with no name, and making the header failed on it every time."""
    return [f for f in extra_cflags if f.strip()]


def pch_stamp(torch_version: str, cxx: str, extra_cflags: list[str], light: bool = True) -> dict[str, Any]:
    """What makes a precompiled header usable by a build (besides the CUDA arch): torch, compiler, flags, and
    which header (a build tries the light one first; the full one only where that fails to compile)."""
    stamp = {"torch": torch_version, "cxx": cxx, "extra_cflags": list(extra_cflags)}
    return {**stamp, "header": "light", "keeps": list(LIGHT_KEEPS)} if light else stamp


def _cxx_std() -> str:
    """The -std flag torch compiles extensions with (it changed across versions)."""
    import torch.utils.cpp_extension as ce
    for fn_name in ("_write_ninja_file_to_build_library", "_write_ninja_file"):
        fn = getattr(ce, fn_name, None)
        if fn is None:
            continue
        with contextlib.suppress(OSError, TypeError):
            m = re.search(r"-std=c\+\+(\d+)", inspect.getsource(fn))
            if m:
                return f"-std=c++{m.group(1)}"
    return "-std=c++17"


class PrecompiledHeaders:
    """The precompiled headers of one build cache (``root/pch``), made on first need, each under its own lock."""

    def __init__(self, root: Path, env: dict[str, Any], is_gcc: bool):
        self.root = Path(root) / "pch"
        self.env = env
        """The toolchain the builds are keyed by (`kforge.backends.build.Builder`): so are the headers."""
        self.is_gcc = is_gcc
        self._light: list[str] | None = None

    def light_includes(self) -> list[str]:
        """What the light ``torch/extension.h`` includes: ``torch/python.h``'s includes less `LIGHT_DROPS`, then
        `LIGHT_KEEPS`; [] (no light header) unless ``torch/extension.h`` is ``torch/all.h`` and ``torch/python.h``,
        as in torch 2.x."""
        if self._light is None:
            import torch.utils.cpp_extension as ce
            inc = [Path(p) for p in ce.include_paths()]
            try:
                top = _INCLUDE.findall((inc[0] / "torch" / "extension.h").read_text())
                python = _INCLUDE.findall((inc[1] / "torch" / "python.h").read_text())
            except (OSError, IndexError):
                top, python = [], []
            fits = top == ["torch/all.h", "torch/python.h"] and "torch/types.h" in python
            keeps = [h for h in LIGHT_KEEPS if (inc[0] / h).is_file()] if fits else []
            self._light = [h for h in python if h not in LIGHT_DROPS] + keeps if fits else []
        return self._light

    def ensure(self, extra_cflags: list[str], light: bool = False) -> Path | None:
        """The directory to put first on the include path: a precompiled torch/extension.h (the light one where
        ``light``) for these flags, made at its first need; None if unusable."""
        if not self.is_gcc:
            return None  # PCH files are compiler-specific; this recipe is for GCC
        extra_cflags = effective_cflags(extra_cflags)
        import torch.utils.cpp_extension as ce
        header = Path(ce.include_paths()[0]) / "torch" / "extension.h"
        flags = ["-DTORCH_API_INCLUDE_EXTENSION_H", _cxx_std(), "-fPIC", *extra_cflags]
        includes = [f"-I{p}" for p in ce.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
        keyed = [self.env, flags, includes] + ([{"header": "light", "includes": self.light_includes()}] if light else [])
        key = hashlib.sha256(json.dumps(keyed).encode()).hexdigest()[:16]
        pch_dir = self.root / key
        gch = pch_dir / "torch" / "extension.h.gch"
        # A second #include <torch/extension.h> (load_inline adds one; many candidates write one too) cannot
        # use the PCH and looks for the header beside it: there, the light header's text, or a one-line header
        # that includes the real one.
        forward = pch_dir / "torch" / "extension.h"
        made_for = json.dumps(pch_stamp(self.env["torch"], self.env["cxx"], extra_cflags, light))
        if gch.is_file() and forward.is_file():
            if not (pch_dir / PCH_STAMP).is_file():  # made before stamps were written: say what it was made for now
                (pch_dir / PCH_STAMP).write_text(made_for)
            return pch_dir
        if (pch_dir / FAILED).is_file():  # the compiler refused these flags once: builds go without a header
            return None
        with locked(self.root / f"{key}.lock"):
            gch.parent.mkdir(parents=True, exist_ok=True)
            if not forward.is_file():
                forward.write_text(light_header(self.light_includes()) if light else
                                   f'#pragma once\n#include "{header}"\n')
            if gch.is_file():
                return pch_dir
            if (pch_dir / FAILED).is_file():
                return None
            tmp = gch.with_suffix(f".tmp{os.getpid()}")
            cxx = os.environ.get("CXX", "c++")
            cmd = [cxx, "-x", "c++-header", str(forward if light else header), "-o", str(tmp), *includes, *flags]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                tmp.unlink(missing_ok=True)
                if proc.returncode > 0:  # the compiler's own refusal, not a kill (memory, a timeout): kept
                    (pch_dir / FAILED).write_text(proc.stderr[-4000:])
                    (pch_dir / PCH_STAMP).write_text(made_for)  # a caller can tell no header will be made
                return None
            os.replace(tmp, gch)
            # What it was built for, so that a caller can tell beforehand whether a build will make another.
            (pch_dir / PCH_STAMP).write_text(made_for)
        return pch_dir


def light_header(includes: list[str]) -> str:
    """The light ``torch/extension.h``: torch's own refusal of stable-ABI builds, then ``includes``."""
    lines = ["#ifndef KFORGE_LIGHT_TORCH_EXTENSION_H", "#define KFORGE_LIGHT_TORCH_EXTENSION_H",
             "#if defined(TORCH_STABLE_ONLY) || defined(TORCH_TARGET_VERSION)",
             '#error "This file should not be included when either TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is '
             'defined."', "#endif", *(f"#include <{h}>" for h in includes), "#endif", ""]
    return "\n".join(lines)
