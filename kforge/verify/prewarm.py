"""What a GPU zygote's spare child does before its candidate arrives, besides making its CUDA context.

A fresh process pays for first use as well as for its context: kernel modules loaded at their first
launch, the cuBLAS and cuDNN handles, and a device allocation (a call into the driver's resource
manager) for each new segment of torch's caching allocator. Part of that driver work takes a lock the
driver holds across the whole host, so with several GPUs a candidate on one waits while another GPU's
process makes or tears down its context (`benchmarks/gpu_contention.py` measures it). A spare has the
previous candidate's whole run to do this problem-independent part, off the GPU slot.

Nothing here runs candidate code or depends on the problem, and the candidate still gets a process and
a context of its own. What it finds is what torch would otherwise set up on demand: loaded kernels,
library handles, and allocator segments that are cached but free (the harness NaN-fills every
allocation during correctness trials, wherever its memory came from).
"""

from __future__ import annotations

import os

RESERVE_ENV = "KFORGE_ZYGOTE_RESERVE_MB"
"""Device memory (MiB) a spare takes into torch's allocator cache ahead of its candidate; 0 for none."""
RESERVE_MB = 1024
"""The default, capped at 5% of the device's memory: the spare holds it while the previous candidate runs."""
SMALL_SEGMENTS = 8
"""2 MiB segments made for torch's small-allocation pool (allocations of 1 MiB or less)."""


def reserve_bytes() -> int:
    """How much a spare reserves: ``RESERVE_ENV`` or the default, at most 5% of the device."""
    import torch
    try:
        mb = int(os.environ.get(RESERVE_ENV, RESERVE_MB))
    except ValueError:
        mb = RESERVE_MB
    if mb <= 0:
        return 0
    total = torch.cuda.get_device_properties(0).total_memory
    return min(mb << 20, total // 20)


def prewarm(reserve: int, stop=None) -> dict[str, float]:
    """First use of the harness's own work on device 0, and ``reserve`` bytes left cached and free.

    Steps go most useful first; ``stop()`` is asked before each, so a spare whose request has come
    serves it at once and its candidate does the rest on demand. Returns the seconds each step took.
    """
    import time

    import torch
    import torch.nn.functional as F

    from .compare import check_degenerate, compare_tensor
    dev = torch.device("cuda", 0)
    x: dict = {}

    def allocator():  # segments cut into the candidate's allocations later, with no driver call then
        small = [torch.empty(1 << 20, dtype=torch.uint8, device=dev) for _ in range(2 * SMALL_SEGMENTS)]
        big = torch.empty(reserve, dtype=torch.uint8, device=dev) if reserve else None
        del small, big

    def draw_and_compare():  # inputs drawn on the device, copies, NaN fills, the fp32 comparison
        torch.manual_seed(0)
        x["a"], x["b"] = torch.randn(64, 64, device=dev), torch.rand(64, 64, device=dev).clone()
        compare_tensor(x["a"], x["a"].clone(), 1e-4, 1e-4)
        check_degenerate(x["a"], x["a"])
        torch.equal(x["a"], x["b"])
        x["a"].clone().fill_(float("nan"))

    def cublas():  # the handle, its workspace, and the first GEMM kernels
        x["a"] @ x["b"]

    def cudnn():
        F.conv2d(x["a"].view(1, 1, 64, 64), x["b"][:3, :3].reshape(1, 1, 3, 3))

    def half_types():
        for h in (x["a"].half(), x["a"].bfloat16()):
            compare_tensor(h, h.clone(), 1e-2, 1e-2)
            h @ h

    took: dict[str, float] = {}
    with torch.no_grad():
        for step in (allocator, draw_and_compare, cublas, cudnn, half_types):
            if stop is not None and stop():
                break
            t0 = time.monotonic()
            step()
            torch.cuda.synchronize()
            took[step.__name__] = time.monotonic() - t0
    return took
