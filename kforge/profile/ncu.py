"""Nsight Compute (``ncu``): profile a candidate's kernels and parse the report.

ncu launches ``python -m kforge.profile.runner`` itself, with ``--clock-control none`` (clocks as
the verifier sees them) and an NVTX filter so only kernels inside the runner's ``kforge`` ranges — the
candidate's forward calls — are profiled; the L2 flush and the reference are not. The report is kept
(``.ncu-rep``) and exported once to CSV (``--page raw``, base units), which `parse_raw_csv` reads.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .base import Profile, ProfilerUnavailable
from .protocol import ProfileRequest
from .runner import NVTX_RANGE, run_under, training_step

DURATION = "gpu__time_duration.sum"

#: kforge's short name -> ncu metric. Chosen to explain a kernel in a few numbers: time, where the
#: memory traffic goes, how busy the SMs are, occupancy and what limits it, spills, and why warps stall.
METRICS: dict[str, str] = {
    "duration_ns": DURATION,
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_pct": "lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
    "l1_pct": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "tensor_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "fma_pct": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "local_load_bytes": "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "local_store_bytes": "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    "registers": "launch__registers_per_thread",
    "smem_static_bytes": "launch__shared_mem_per_block_static",
    "smem_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "waves": "launch__waves_per_multiprocessor",
}
STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "membar", "mio_throttle", "lg_throttle",
          "math_pipe_throttle", "wait", "not_selected", "no_instruction", "drain", "imc_miss",
          "branch_resolving", "dispatch_stall", "tex_throttle", "sleeping")
for _reason in STALLS:
    METRICS[f"stall_{_reason}"] = f"smsp__average_warps_issue_stalled_{_reason}_per_issue_active.ratio"
# Columns of the raw page that describe the launch rather than measure it.
_ID_COLUMNS = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
               "Block Size", "Grid Size", "Device", "CC", "Section Name", "Function Name", "Demangled Name"}


class NcuError(ProfilerUnavailable):
    """ncu could not profile; the message says why (missing tool, no counters, candidate failed)."""


@dataclass
class NcuKernel:
    """One profiled kernel launch."""

    name: str
    metrics: dict[str, float] = field(default_factory=dict)
    launch: dict[str, str] = field(default_factory=dict)
    """Non-numeric launch columns (grid and block size, stream, ...)."""


@dataclass
class NcuReport:
    kernels: list[NcuKernel]
    csv_path: str | None = None
    report_path: str | None = None
    seconds: float = 0.0
    """Wall time of the ncu run (profiling overhead included)."""
    iterations: int = 1
    """How many forward calls were profiled (kernels repeat once per call)."""
    missing_metrics: list[str] = field(default_factory=list)


def available_metrics(ncu: str) -> set[str] | None:
    """Base names this ncu knows for the local GPU (``--query-metrics``); None if it cannot say."""
    try:
        out = subprocess.run([ncu, "--query-metrics", "--csv"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    names = set()
    for row in csv.reader(io.StringIO(out.stdout)):
        if row and "__" in row[0]:
            names.add(row[0].strip())
    return names or None


def supported(metrics: list[str], known: set[str] | None) -> tuple[list[str], list[str]]:
    """(kept, dropped): launch__ metrics are always known; others must be in ``--query-metrics``."""
    if known is None:
        return list(metrics), []
    keep, drop = [], []
    for m in metrics:
        (keep if m.startswith("launch__") or m.split(".")[0] in known else drop).append(m)
    return keep, drop


def find_ncu() -> str | None:
    for candidate in (os.environ.get("KFORGE_NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def _number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def parse_raw_csv(text: str) -> list[NcuKernel]:
    """Rows of ``ncu --csv --page raw``: a header, a units row, then one row per kernel launch."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return []
    header = rows[0]
    body = rows[1:]
    if body and (not body[0] or body[0][0] in ("", "ID") or all(not c or not c[0].isdigit() for c in body[0][:1])):
        body = body[1:]  # the units row
    kernels = []
    for row in body:
        if len(row) != len(header):
            continue
        rec = dict(zip(header, row))
        metrics, launch = {}, {}
        for col, val in rec.items():
            if col in _ID_COLUMNS:
                launch[col] = val
                continue
            num = _number(val)
            if num is not None:
                metrics[col] = num
            elif val:
                launch[col] = val
        kernels.append(NcuKernel(name=rec.get("Kernel Name", "?"), metrics=metrics, launch=launch))
    return kernels


def profile(workdir: str | os.PathLike, request: ProfileRequest, files: dict[str, str], metrics: list[str], *,
            gpu: int | None = None, timeout: float = 600.0, iterations: int = 3) -> NcuReport:
    """Profile one program (``request.which``: candidate or reference) under ncu in ``workdir``."""
    ncu = find_ncu()
    if ncu is None:
        raise NcuError("ncu (Nsight Compute) is not installed or not on PATH; set KFORGE_NCU to its path")
    metrics, dropped = supported(metrics, available_metrics(ncu) if len(metrics) > 1 else None)
    wd = Path(workdir)
    report = wd / "profile.ncu-rep"
    # a training step's range is a start/end range (see kforge.profile.runner), named without the push/pop slash
    include = NVTX_RANGE if training_step(request) else f"{NVTX_RANGE}/"
    prefix = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", include,
              "--metrics", ",".join(metrics), "--export", str(report), "--force-overwrite"]
    try:
        code, out, seconds = run_under(prefix, wd, request, files, gpu=gpu, timeout=timeout, iterations=iterations)
    except TimeoutError as exc:
        raise NcuError(str(exc)) from None
    if code != 0 or not report.is_file():
        raise NcuError(f"ncu failed (exit {code}): " + "\n".join(out.strip().splitlines()[-12:]))
    exported = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"],
                              capture_output=True, text=True, timeout=300)
    if exported.returncode != 0:
        raise NcuError(f"ncu could not export its report: {exported.stderr.strip()[-500:]}")
    csv_path = wd / "profile.csv"
    csv_path.write_text(exported.stdout)
    kernels = parse_raw_csv(exported.stdout)
    if not kernels:
        raise NcuError("ncu profiled no kernels inside the kforge NVTX ranges: "
                       + " | ".join(out.strip().splitlines()[-6:]))
    present = set().union(*(k.metrics for k in kernels)) if kernels else set()
    return NcuReport(kernels=kernels, csv_path=str(csv_path), report_path=str(report),
                     seconds=seconds, iterations=iterations,
                     missing_metrics=dropped + [m for m in metrics if m not in present])


def to_profile(report: NcuReport, device: str) -> Profile:
    """Group launches by kernel name; per-call time, and metrics weighted by each launch's duration."""
    from .base import KernelStat
    reverse = {v: k for k, v in METRICS.items()}
    n = max(1, report.iterations)
    groups: dict[str, list[NcuKernel]] = {}
    for k in report.kernels:
        groups.setdefault(k.name, []).append(k)
    kernels = []
    for name, launches in groups.items():
        weights = [max(k.metrics.get(DURATION, 0.0), 1e-9) for k in launches]
        total_w = sum(weights)
        merged: dict[str, float] = {}
        for col in {c for k in launches for c in k.metrics}:
            vals = [(k.metrics[col], w) for k, w in zip(launches, weights) if col in k.metrics]
            if vals:
                merged[reverse.get(col, col)] = sum(v * w for v, w in vals) / sum(w for _, w in vals)
        kernels.append(KernelStat(name=name, time_ms=total_w / n / 1e6, calls=max(1, len(launches) // n),
                                  metrics=merged))
    notes = [f"ncu does not know {m} on this GPU" for m in report.missing_metrics]
    return Profile(tool="ncu", device=device, kernels=kernels, total_ms=sum(k.time_ms for k in kernels),
                   raw_files={k: v for k, v in (("ncu_csv", report.csv_path), ("ncu_report", report.report_path)) if v},
                   seconds=report.seconds, notes=notes)


def per_call_duration_ms(report: NcuReport) -> list[float]:
    """GPU time of each profiled forward call: the kernels' durations summed, call by call."""
    durations = [k.metrics.get(DURATION) for k in report.kernels]
    durations = [d for d in durations if d is not None]
    n = max(1, report.iterations)
    if not durations or len(durations) % n:
        return [sum(durations) / n / 1e6] if durations else []
    per = len(durations) // n
    return [sum(durations[i * per:(i + 1) * per]) / 1e6 for i in range(n)]
