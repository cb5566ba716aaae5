"""A candidate run at a reduced precision in this process, the way KernelBench's ``precision=`` runs one:
every floating tensor of ``get_inputs()`` and ``get_init_inputs()`` cast to the dtype, the reference
``Model`` and the candidate ``ModelNew`` built from one seed and moved with ``.to(dtype=...)``. The
candidate's output is judged against an fp32 computation of the reference from the same cast inputs and
weights, with a tolerance of about 4 unit roundoffs relative plus the same share of the output's scale
(`RTOL`). fp32 runs too, for kernels that the Triton interpreter can only run in fp32 (its ``tl.dot`` does
not handle bf16).

It checks kernels, not the verifier: the verifier's own precision support is tested beside the verifier.
C++ extensions build through kforge's cached builder, so a second run costs no compile.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

#: Relative tolerance per storage dtype: 4 unit roundoffs for bf16 and fp16 (about what the verifier's kforge
#: rules allow there); for fp32 the verifier's 1e-4, which also covers the reference's own rounding.
RTOL = {torch.bfloat16: 4 * 2.0 ** -8, torch.float16: 4 * 2.0 ** -11, torch.float32: 1e-4}


@dataclass
class CastRun:
    """One run: the candidate's outputs (in its dtype) and the fp32 reference's."""

    dtype: torch.dtype
    outs: list[torch.Tensor]
    refs: list[torch.Tensor]

    @property
    def rtol(self) -> float:
        return RTOL[self.dtype]

    def worst(self) -> float:
        """The largest error as a share of the allowed one (<= 1 passes), over every output."""
        worst = 0.0
        for out, ref in zip(self.outs, self.refs):
            scale = ref.float().pow(2).mean().sqrt().item()  # the output's own size: absolute slack near 0
            allowed = self.rtol * (ref.float().abs() + scale)
            worst = max(worst, ((out.float() - ref.float()).abs() / allowed).max().item())
        return worst

    def check(self, what: str) -> None:
        """Raise AssertionError saying where and by how much the candidate missed."""
        for i, (out, ref) in enumerate(zip(self.outs, self.refs)):
            assert out.dtype == self.dtype, f"{what}: output {i} is {out.dtype}, not {self.dtype}"
            assert out.shape == ref.shape, f"{what}: output {i} has shape {tuple(out.shape)}, not {tuple(ref.shape)}"
            assert torch.isfinite(out.float()).all(), f"{what}: output {i} has non-finite values"
        worst = self.worst()
        assert worst <= 1.0, f"{what}: error {worst:.2f}x the tolerance (rtol {self.rtol:.2e} at {self.dtype})"


def _module(source: str, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = f"<{name}>"
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def _cast(values, dtype: torch.dtype, device: str) -> list:
    return [v.to(device=device, dtype=dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
            else (v.to(device) if isinstance(v, torch.Tensor) else v) for v in values]


def _as_list(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def run_at(problem_source: str, candidate_source: str, dtype: torch.dtype, *, device: str = "cpu",
           seed: int = 0) -> CastRun:
    """Build both models at ``dtype`` from one seed, run them on the same cast inputs; the reference in fp32."""
    if dtype not in RTOL:
        raise ValueError(f"run_at judges {', '.join(map(str, RTOL))}, not {dtype}")
    ref_mod = _module(problem_source, "reference")
    cand_mod = _module(candidate_source, "candidate")
    torch.manual_seed(seed)
    init = _cast(ref_mod.get_init_inputs(), dtype, device)
    torch.manual_seed(seed + 1)
    inputs = _cast(ref_mod.get_inputs(), dtype, device)
    torch.manual_seed(seed + 2)
    model = ref_mod.Model(*init).to(device=device, dtype=dtype)
    torch.manual_seed(seed + 2)
    new = cand_mod.ModelNew(*init).to(device=device, dtype=dtype)
    with torch.no_grad():
        outs = _as_list(new(*inputs))
        wide = [x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        refs = _as_list(model.float()(*wide))  # widening is exact: the same values, in fp32
    return CastRun(dtype, outs, refs)


@contextlib.contextmanager
def cached_builds(cache_root: Path) -> Iterator[None]:
    """Candidates' ``load_inline``/``load`` build through kforge's cache (as in a worker) inside the block."""
    import torch.utils.cpp_extension as ce

    from kforge.backends.build import Builder
    saved = ce.load_inline, ce.load
    Builder(cache_root / "ext").install()
    try:
        yield
    finally:
        ce.load_inline, ce.load = saved


def in_triton_interpreter(cases: dict[str, tuple[str, str, str]]) -> dict[str, str | None]:
    """Run each case, name -> (problem source, candidate source, dtype name), in one fresh process with
    ``TRITON_INTERPRET=1``; name -> None where it passed, else what went wrong. A fresh process because Triton
    must be imported in that mode: its library functions (``tl.sum``, ``tl.max``) are jitted at import."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "tests.precision_harness"], input=json.dumps(cases), text=True,
                          capture_output=True, cwd=root, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the interpreter process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _interpreter_child() -> None:
    from kforge.backends.triton_bf16 import install
    install()  # as a kforge worker running the interpreter does (TritonBackend.prepare): bf16 by value
    cases = json.loads(sys.stdin.read())
    results: dict[str, str | None] = {}
    for name, (problem, candidate, dtype) in cases.items():
        try:
            run_at(problem, candidate, getattr(torch, dtype)).check(name)
            results[name] = None
        except Exception as exc:  # reported to the parent, which fails the test that owns the case
            results[name] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
    print(json.dumps(results))


if __name__ == "__main__":
    _interpreter_child()
