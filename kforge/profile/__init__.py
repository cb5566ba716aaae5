"""Profilers (ncu, torch, nsys), the digest and the rule-based analyst.

`Profiler.run` profiles one candidate on the verifier's own worker pool: ``torch`` inside a worker
process (any device), ``ncu`` and ``nsys`` as the parent of a runner process while holding the GPU's
slot, so no verification shares the GPU with a profile.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from ..sandbox.dispatch import register
from ..sandbox.gpus import arch_of
from .base import KernelStat, Profile, ProfilerUnavailable
from .protocol import ProfileRequest

PROFILERS = ("none", "torch", "ncu", "nsys")

# torch.profiler runs in a worker's child (see kforge.sandbox.dispatch); registered before any pool starts.
register("profile_torch", "kforge.profile.torch_profiler:run_in_worker")


class Profiler:
    """One profiler kind, bound to a worker pool."""

    def __init__(self, kind: str, pool, workdir: str | Path, *, iterations: int = 3, timeout_s: float = 600.0,
                 metrics: list[str] | None = None):
        if kind not in PROFILERS:
            raise ValueError(f"unknown profiler {kind!r} (choose from {', '.join(PROFILERS)})")
        self.kind, self.pool, self.iterations, self.timeout_s = kind, pool, iterations, timeout_s
        self.workdir = Path(workdir)
        self.metrics = metrics

    def run(self, problem, code: str, backend, config: dict[str, Any] | None = None) -> Profile:
        from ..verify import VerifyConfig
        kinds = self.pool.kinds_for(backend.device)
        info = self.pool.device_info(kinds[0], backend.spec())  # the sweep's GPUs are one model (see Verifier.arch)
        request = ProfileRequest(problem=problem, backend=backend.spec(), config=config or VerifyConfig().to_dict(),
                                 cache_dir=self.pool.build_cache, arch=arch_of(info.capability) if info.capability
                                 else None, iterations=self.iterations)
        files = {"problem.py": problem.source, "candidate.py": code}
        device = info.device if not info.error else backend.device
        if self.kind == "torch":
            from .torch_profiler import to_profile
            reply = self.pool.request(kinds, request, files, self.timeout_s)
            result = reply.result
            if result is None or result.error:
                why = (result.error if result else None) or reply.error or reply.output_tail or "no result"
                raise ProfilerUnavailable(f"torch.profiler failed: {why}")
            prof = to_profile(result, device)
            raw = self.workdir / f"torch-{uuid.uuid4().hex[:8]}.txt"
            raw.parent.mkdir(parents=True, exist_ok=True)
            raw.write_text(result.table)
            prof.raw_files["torch_table"] = str(raw)
            prof.seconds = reply.wall_s
            return prof
        if backend.device != "cuda":
            raise ProfilerUnavailable(f"profiler={self.kind} profiles NVIDIA GPU kernels; the {backend.name} backend "
                                      f"runs on {backend.device}: use profiler=torch")
        wd = self.workdir / f"{self.kind}-{uuid.uuid4().hex[:8]}"
        with self.pool.slot(kinds) as slot:  # whichever GPU frees up first is ours while profiling
            gpu = int(slot.kind.split(":")[1])
            if self.kind == "ncu":
                from . import ncu
                names = self.metrics or list(ncu.METRICS.values())
                report = ncu.profile(wd, request, files, names, gpu=gpu, timeout=self.timeout_s,
                                     iterations=self.iterations)
                return ncu.to_profile(report, device)
            from . import nsys
            return nsys.profile(wd, request, files, device=device, gpu=gpu, timeout=self.timeout_s,
                                iterations=self.iterations)


__all__ = ["KernelStat", "Profile", "ProfilerUnavailable", "Profiler", "PROFILERS"]
