"""Measured ceilings of a device: memory bandwidth and matrix-multiply rates (METHOD.md's "two numbers").

Datasheet peaks are leads; what a kernel can reach is what a large copy and a large library matrix
product reach, so that is what the roofline floor and speed-of-light % use. Measured once per device
(in a worker's child) and cached in kforge's cache directory. A GPU is timed with CUDA events, which
count the device's time alone: a ceiling that reads low makes honest kernels look faster than possible
(a host-clock reading taken on a busy H200 once came out a third low).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from ..cachefile import read_json, write_json


def _timed(fn, reps: int, cuda: bool) -> float:
    """Median seconds of ``fn``: CUDA events around it on a GPU, the host clock on a CPU."""
    import torch
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(device: str) -> dict[str, Any]:
    """Runs in a worker process: bandwidth (bytes read + written per second) and fp32 (CUDA cores), TF32 and bf16
    (tensor cores; fp16 runs at bf16's rate) matmul FLOP/s."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    cuda = device == "cuda"
    dev = torch.device(device)
    n_copy = (1 << 28) if cuda else (1 << 25)  # 1 GiB on a GPU, 128 MiB on a CPU (past any cache)
    src = torch.rand(n_copy, device=dev)
    dst = torch.empty_like(src)
    t = _timed(lambda: dst.copy_(src), 10 if cuda else 5, cuda)
    bandwidth = 2 * src.numel() * 4 / t
    src = dst = None  # free the 2 GiB before the matmuls
    out: dict[str, Any] = {"bandwidth_bytes_per_s": bandwidth}
    n = 8192 if cuda else 1024
    for dtype, key, tf32 in ((torch.float32, "fp32_flops", False), (torch.float32, "tf32_flops", True),
                             (torch.bfloat16, "bf16_flops", False)):
        if not cuda and key != "fp32_flops":
            continue
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        t = _timed(lambda: torch.mm(a, b), 5, cuda)
        out[key] = 2 * n ** 3 / t
    torch.backends.cuda.matmul.allow_tf32 = False
    if cuda:
        out["device"] = torch.cuda.get_device_name()
    out["torch"] = torch.__version__
    return out


RATES = ("bandwidth_bytes_per_s", "fp32_flops", "tf32_flops", "bf16_flops")


class CeilingCache:
    """``ceilings.json``: one entry per (device name, torch version).

    Each rate keeps the highest value measured: a ceiling is what the device was seen to reach, and a
    measurement taken while something else used it reads low.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _all(self) -> dict[str, Any]:
        return read_json(self.path) or {}

    def get(self, key: str) -> dict[str, Any] | None:
        return self._all().get(key)

    def put(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        """Record a measurement; what is now cached (the higher of old and new for each rate)."""
        data = self._all()
        old = data.get(key) or {}
        value = dict(value)
        for rate in RATES:
            if (old.get(rate) or 0) > (value.get(rate) or 0):
                value[rate] = old[rate]
        data[key] = value
        write_json(self.path, data)
        return value


#: On a CPU the measured bandwidth is DRAM's; data that fits in the caches moves faster, so a floor
#: is only claimed for problems that move more than this.
CPU_FLOOR_MIN_BYTES = 256 * 2**20


def floor_ms(problem, ceilings: dict[str, Any] | None, device: str = "cuda", peak: str = "fp32_flops") -> float | None:
    """The roofline floor of a problem on a device: its FLOPs at the ``peak`` rate of its precision (fp32 on CUDA
    cores, TF32 or bf16 on tensor cores; a rate not measured falls back to fp32's) and its bytes at the measured
    bandwidth."""
    if not ceilings:
        return None
    if device == "cpu" and (problem.bytes or 0) < CPU_FLOOR_MIN_BYTES:
        return None
    s = problem.floor_seconds(ceilings.get(peak) or ceilings.get("fp32_flops"), ceilings.get("bandwidth_bytes_per_s"))
    return s * 1e3 if s else None
