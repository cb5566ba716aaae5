"""Nsight Systems (``nsys``): a timeline of the candidate's kernels, summarised per kernel.

Where nsys cannot make a report (seen on this project's GPU machines: it writes a ``.qdstrm`` but
no ``.nsys-rep``), `profile` raises `ProfilerUnavailable` saying so; use ``profiler=ncu`` or
``profiler=torch`` there.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from pathlib import Path

from .base import KernelStat, Profile, ProfilerUnavailable
from .protocol import ProfileRequest
from .runner import NVTX_RANGE, run_under


def find_nsys() -> str | None:
    for candidate in (os.environ.get("KFORGE_NSYS"), shutil.which("nsys")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def parse_kern_sum(text: str, iterations: int) -> list[KernelStat]:
    """``nsys stats --report cuda_gpu_kern_sum --format csv``: total time and instances per kernel."""
    lines = [ln for ln in text.splitlines() if ln.count(",") >= 3]
    kernels = []
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        total = row.get("Total Time (ns)") or row.get("Total Time")
        if total is None or not row.get("Name"):
            continue
        n = max(1, iterations)
        kernels.append(KernelStat(name=row["Name"], time_ms=float(total.replace(",", "")) / n / 1e6,
                                  calls=max(1, int(float(row.get("Instances", "1").replace(",", ""))) // n)))
    return kernels


def profile(workdir: str | os.PathLike, request: ProfileRequest, files: dict[str, str], *, device: str,
            gpu: int | None = None, timeout: float = 600.0, iterations: int = 3) -> Profile:
    nsys = find_nsys()
    if nsys is None:
        raise ProfilerUnavailable("nsys (Nsight Systems) is not on PATH; set KFORGE_NSYS, or use profiler=ncu or "
                                  "profiler=torch")
    wd = Path(workdir)
    out = wd / "timeline"
    # Only the kforge NVTX ranges (the candidate's profiled calls) are captured.
    prefix = [nsys, "profile", "--trace=cuda,nvtx", "--capture-range=nvtx", f"--nvtx-capture={NVTX_RANGE}",
              "--capture-range-end=repeat", f"--output={out}", "--force-overwrite=true"]
    try:
        code, log, seconds = run_under(prefix, wd, request, files, gpu=gpu, timeout=timeout, iterations=iterations)
    except TimeoutError as exc:
        raise ProfilerUnavailable(str(exc)) from None
    reports = sorted(wd.glob("timeline*.nsys-rep"))
    if not reports:
        leftovers = ", ".join(p.name for p in wd.glob("timeline*")) or "nothing"
        raise ProfilerUnavailable(f"nsys produced no report here (it left {leftovers}; exit {code}): "
                                  + " | ".join(log.strip().splitlines()[-4:]) + " — use profiler=ncu or profiler=torch")
    stats = subprocess.run([nsys, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", "--output", "-",
                            str(reports[0])], capture_output=True, text=True, timeout=300)
    (wd / "kern_sum.csv").write_text(stats.stdout)
    kernels = parse_kern_sum(stats.stdout, iterations)
    if not kernels:
        raise ProfilerUnavailable(f"nsys stats found no kernels: {stats.stderr.strip()[-300:]}")
    return Profile(tool="nsys", device=device, kernels=kernels, total_ms=sum(k.time_ms for k in kernels),
                   raw_files={"nsys_report": str(reports[0]), "nsys_kern_sum": str(wd / "kern_sum.csv")},
                   seconds=seconds)
