"""The digest as a picture: roofline position and top metrics (for people, and for multimodal models,
mirroring the paper's profiler screenshots)."""

from __future__ import annotations

import threading
from pathlib import Path

from .digest import Digest

# Problem loops run in threads and matplotlib is not thread-safe (its mathtext parser keeps shared
# state: two digests drawn at once failed with "pop from empty list"), so one picture at a time.
_LOCK = threading.Lock()


def render_png(d: Digest, path: str | Path) -> Path:
    import matplotlib
    # Kernel names are not TeX: a "$" in one would otherwise be parsed as mathtext.
    with _LOCK, matplotlib.rc_context({"text.parse_math": False}):
        return _render(d, Path(path))


def _render(d: Digest, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    # Roofline: attainable FLOP/s = min(peak, intensity * bandwidth).
    if d.peak_gbps and d.peak_tflops:
        import numpy as np
        xs = np.logspace(-2, 4, 200)
        ax1.loglog(xs, np.minimum(d.peak_tflops, xs * d.peak_gbps / 1e3), color="0.3", label="measured roofline")
        if d.intensity and d.achieved_tflops:
            ax1.loglog([d.intensity], [d.achieved_tflops], "o", color="tab:red", markersize=9, label="this kernel")
            if d.speed_of_light is not None:
                ax1.annotate(f"{100 * d.speed_of_light:.0f}% of speed of light", (d.intensity, d.achieved_tflops),
                             textcoords="offset points", xytext=(8, -14), fontsize=9)
        ax1.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax1.set_ylabel("TFLOP/s")
        ax1.legend(loc="lower right", fontsize=8)
    else:
        ax1.text(0.5, 0.5, "no FLOPs/bytes or ceilings:\nno roofline", ha="center", va="center")
        ax1.set_axis_off()
    ax1.set_title(f"{d.problem}: {d.time_ms:.4f} ms, {d.bound}-bound", fontsize=10)
    # Top metrics of the top kernel, as % of peak where they are percentages, else kernel time shares.
    top = d.kernels[0] if d.kernels else None
    pct = {k: v for k, v in (top.metrics.items() if top else []) if k.endswith("_pct")}
    if pct:
        names, vals = list(pct), list(pct.values())
        ax2.barh(names, vals, color="tab:blue")
        ax2.set_xlim(0, 100)
        ax2.set_xlabel("% of peak (top kernel)")
        if top.stalls:
            ax2.text(1, -0.9, "stalls: " + ", ".join(f"{r} {v:.1f}" for r, v in top.stalls), fontsize=8,
                     transform=ax2.get_yaxis_transform())
    elif d.kernels:
        ax2.barh([k.name[:24] + ("…" if len(k.name) > 24 else "") for k in d.kernels],
                 [100 * k.share for k in d.kernels], color="tab:blue")
        ax2.set_xlabel("% of time per call")
    ax2.set_title(f"{d.tool} on {d.device[:40]}", fontsize=10)
    ax2.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
