"""The digest: the few numbers that explain a kernel, anchored to the roofline.

Profilers report hundreds of metrics; the KForge paper found raw output overwhelming and profiling
feedback inconsistent. A digest keeps, per kernel, time and share, achieved bandwidth and FLOP/s
against the device's measured ceilings, speed-of-light %, a class (memory-, compute- or
latency-bound) and the handful of metrics behind that class.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..precision import get_precision
from .base import Profile

#: Metrics worth showing, in order (kforge short names from `kforge.profile.ncu.METRICS`).
KEY_METRICS = ("dram_pct", "l2_pct", "l1_pct", "sm_pct", "occupancy_pct", "fma_pct", "tensor_pct", "registers",
               "smem_static_bytes", "smem_dynamic_bytes", "block_size", "grid_size", "local_load_bytes",
               "local_store_bytes")
LATENCY_MS = 0.05
"""A whole forward call under this is latency-bound whatever else the numbers say (launch overhead)."""


@dataclass
class KernelDigest:
    name: str
    time_ms: float
    share: float
    """Fraction of the forward call's kernel time."""
    calls: int
    metrics: dict[str, float] = field(default_factory=dict)
    stalls: list[tuple[str, float]] = field(default_factory=list)
    """Top warp-stall reasons (cycles per issued instruction)."""


@dataclass
class Digest:
    problem: str
    device: str
    tool: str
    time_ms: float
    """Candidate time per call (the verifier's median when known, else the profiler's)."""
    bound: str
    """``memory``, ``compute``, ``latency`` or ``unknown``."""
    launches: int
    """Kernel launches per forward call."""
    kernels: list[KernelDigest]
    floor_ms: float | None = None
    speed_of_light: float | None = None
    flops: float | None = None
    bytes: float | None = None
    intensity: float | None = None
    """FLOPs per byte of the problem."""
    ridge: float | None = None
    """Intensity at which the device turns from memory- to compute-bound."""
    achieved_gbps: float | None = None
    peak_gbps: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    precision: str = "fp32"
    """The precision the problem runs in (`kforge.precision`): its peak is the compute ceiling."""
    notes: list[str] = field(default_factory=list)

    @property
    def bandwidth_fraction(self) -> float | None:
        return self.achieved_gbps / self.peak_gbps if self.achieved_gbps and self.peak_gbps else None

    @property
    def compute_fraction(self) -> float | None:
        return self.achieved_tflops / self.peak_tflops if self.achieved_tflops and self.peak_tflops else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(bandwidth_fraction=self.bandwidth_fraction, compute_fraction=self.compute_fraction)
        return d

    def text(self) -> str:
        """Compact markdown for a prompt."""
        def pct(x):
            return f"{100 * x:.0f}%" if x is not None else "n/a"
        lines = [f"- time per call: {self.time_ms:.4f} ms on {self.device} ({self.tool} profile)",
                 f"- class: {self.bound}-bound; {self.launches} kernel launch(es) per call"
                 + (f"; precision {self.precision} (tensor cores)" if self.precision != "fp32" else "")]
        if self.floor_ms:
            lines.append(f"- roofline floor {self.floor_ms:.4f} ms: speed of light {pct(self.speed_of_light)}")
        if self.achieved_gbps is not None:
            lines.append(f"- memory: {self.achieved_gbps:.0f} GB/s of {self.peak_gbps:.0f} GB/s measured peak "
                         f"({pct(self.bandwidth_fraction)}) for the problem's minimum bytes")
        if self.achieved_tflops is not None:
            lines.append(f"- compute: {self.achieved_tflops:.2f} of {self.peak_tflops:.1f} TFLOP/s "
                         f"({pct(self.compute_fraction)}); intensity {self.intensity:.2f} FLOP/B vs ridge {self.ridge:.1f}")
        for k in self.kernels:
            lines.append(f"- kernel `{k.name[:90]}`: {k.time_ms:.4f} ms ({pct(k.share)} of kernel time, {k.calls} "
                         f"launch(es)/call)")
            if k.metrics:
                lines.append("  " + ", ".join(f"{m}={_fmt(v)}" for m, v in k.metrics.items()))
            if k.stalls:
                lines.append("  top stalls: " + ", ".join(f"{r} {v:.2f}" for r, v in k.stalls))
        lines.extend(f"- note: {n}" for n in self.notes)
        return "\n".join(lines)


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _classify(time_ms: float, intensity: float | None, ridge: float | None, top: KernelDigest | None,
              bw_frac: float | None, c_frac: float | None) -> str:
    if time_ms < LATENCY_MS:
        return "latency"
    if top is not None and "dram_pct" in top.metrics and "sm_pct" in top.metrics:
        dram, sm = top.metrics["dram_pct"], top.metrics["sm_pct"]
        if max(dram, sm) < 40:
            occ = top.metrics.get("occupancy_pct")
            if occ is not None and occ < 30:
                return "latency"  # neither memory nor the SMs busy, few warps: too little work in flight
            if intensity is not None and ridge is not None:
                return "memory" if intensity < ridge else "compute"  # busy with neither: what the work needs
        return "memory" if dram >= sm else "compute"
    if intensity is not None and ridge is not None:
        busy = max(x for x in (bw_frac, c_frac, 0.0) if x is not None)
        if busy < 0.1 and time_ms < 1.0:
            return "latency"
        return "memory" if intensity < ridge else "compute"
    return "unknown"


def build(problem, profile: Profile | None, *, time_ms: float | None = None, floor_ms: float | None = None,
          ceilings: dict[str, Any] | None = None, top: int = 5, device: str = "", precision: str = "fp32") -> Digest:
    """Digest a profile of one problem's candidate; without a profile, the roofline position alone. The compute
    ceiling is the precision's (fp32 on CUDA cores, TF32 or bf16 on tensor cores)."""
    if profile is None:
        profile = Profile(tool="roofline only (no profiler)", device=device or "?", kernels=[],
                          total_ms=time_ms or 0.0)
    t = time_ms if time_ms else profile.total_ms
    total_kernel = sum(k.time_ms for k in profile.kernels) or t
    kernels = []
    for k in profile.top(top):
        metrics = {m: k.metrics[m] for m in KEY_METRICS if m in k.metrics}
        stalls = sorted(((m[len("stall_"):], v) for m, v in k.metrics.items() if m.startswith("stall_") and v > 0),
                        key=lambda x: x[1], reverse=True)[:3]
        kernels.append(KernelDigest(k.name, k.time_ms, k.time_ms / total_kernel if total_kernel else 0.0, k.calls,
                                    metrics, stalls))
    c = ceilings or {}
    peak_bw = c.get("bandwidth_bytes_per_s")
    peak_fl = c.get(get_precision(precision).peak) or c.get("fp32_flops")
    d = Digest(problem=problem.key, device=profile.device, tool=profile.tool, time_ms=t, bound="unknown",
               launches=sum(k.calls for k in profile.kernels), kernels=kernels, floor_ms=floor_ms,
               speed_of_light=floor_ms / t if floor_ms and t else None, flops=problem.flops, bytes=problem.bytes,
               precision=precision, notes=list(profile.notes))
    secs = t / 1e3
    if problem.bytes and peak_bw:
        d.achieved_gbps, d.peak_gbps = problem.bytes / secs / 1e9, peak_bw / 1e9
    if problem.flops and peak_fl:
        d.achieved_tflops, d.peak_tflops = problem.flops / secs / 1e12, peak_fl / 1e12
    if problem.flops and problem.bytes:
        d.intensity = problem.flops / problem.bytes
    if peak_bw and peak_fl:
        d.ridge = peak_fl / peak_bw
    d.bound = _classify(t, d.intensity, d.ridge, kernels[0] if kernels else None, d.bandwidth_fraction,
                        d.compute_fraction)
    return d
