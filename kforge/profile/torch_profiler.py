"""``torch.profiler``: operator and kernel tables on any device, CPU included. Runs inside a worker.

In the backward mode a profiled call is a training step; each kernel (operator on a CPU) is marked with the pass
it ran in, found from the step's pass ranges (`kforge.verify.backward`), so the analysis sees the backward's
kernels as such."""

from __future__ import annotations

from .base import KernelStat, Profile
from .protocol import OpRow, ProfileRequest, ProfileResult

FORWARD_RANGE = "kforge_forward"
"""The range around each profiled call (a forward, or a training step)."""


def run_in_worker(req: ProfileRequest) -> ProfileResult:
    """Worker request ``profile_torch``: profile ``iterations`` forward calls of the candidate."""
    from ..sandbox.harness import HarnessVerdict
    from ..sandbox.quiet import take_quiet_lock
    from .runner import load_program, training_step
    take_quiet_lock()  # no other child times or makes a context on this GPU meanwhile
    try:
        h, model = load_program(req)
    except HarnessVerdict as v:
        return ProfileResult(error=f"{v.state}: {v.message}")
    torch = h.torch
    from torch.profiler import ProfilerActivity, profile, record_function
    cuda = h.device.type == "cuda"
    iters = req.iterations
    inputs = h.inputs(h.draw())
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad():
        for _ in range(req.warmup):
            model(*inputs)
        h.clock.sync()
        with profile(activities=activities) as prof:
            for _ in range(iters):
                h.clock.flush()
                with record_function(FORWARD_RANGE):
                    model(*inputs)
                h.clock.sync()
    rows = []
    for e in prof.key_averages():
        device_total = getattr(e, "device_time_total", None)
        if device_total is None:
            device_total = getattr(e, "cuda_time_total", 0)
        self_device = getattr(e, "self_device_time_total", None)
        if self_device is None:
            self_device = getattr(e, "self_cuda_time_total", 0)
        rows.append(OpRow(name=e.key, calls=e.count, cpu_total_ms=e.cpu_time_total / 1e3,
                          self_cpu_ms=e.self_cpu_time_total / 1e3, device_total_ms=device_total / 1e3,
                          self_device_ms=self_device / 1e3))
    table = prof.key_averages().table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total",
                                      row_limit=40)
    passes = _passes(prof.events()) if training_step(req) else {}
    return ProfileResult(rows=rows, table=table, iterations=iters, device=str(h.device), passes=passes)


def _passes(events) -> dict[str, str]:
    """Kernel or operator name -> the pass of a training step it started in (``both`` for one that ran in each),
    by time: autograd runs a CUDA backward on threads of its own, outside the step's host ranges."""
    from ..verify.backward import BACKWARD, FORWARD
    spans = {name: [(e.time_range.start, e.time_range.end) for e in events if e.name == rng]
             for name, rng in (("forward", FORWARD), ("backward", BACKWARD))}
    found: dict[str, str] = {}
    for e in events:
        if e.name in (FORWARD, BACKWARD, FORWARD_RANGE):
            continue
        for name, ranges in spans.items():
            if any(lo <= e.time_range.start <= hi for lo, hi in ranges):
                found[e.name] = name if found.get(e.name, name) == name else "both"
    return found


def to_profile(result: ProfileResult, device_name: str) -> Profile:
    """Kernels per forward call. On a GPU: the device kernels. On a CPU: the operators the forward calls,
    plus the candidate's own code (forward time not spent in any operator)."""
    n = max(1, result.iterations)
    rows = result.rows
    forward = next((r for r in rows if r.name == FORWARD_RANGE), None)
    cuda = result.device.startswith("cuda")
    kernels: list[KernelStat] = []
    if cuda:
        for r in rows:
            if r.self_device_ms > 0 and r.name != FORWARD_RANGE and not r.name.startswith(("aten::", "cuda")):
                kernels.append(KernelStat(r.name, r.self_device_ms / n, max(1, r.calls // n)))
        total = sum(k.time_ms for k in kernels)
    else:
        ops = [r for r in rows if r.name != FORWARD_RANGE and r.self_cpu_ms > 0]
        total = forward.cpu_total_ms / n if forward else sum(r.self_cpu_ms for r in ops) / n
        op_time = 0.0
        for r in ops:
            if r.name.startswith("aten::") or r.name.startswith("torch"):
                kernels.append(KernelStat(r.name, r.self_cpu_ms / n, max(1, r.calls // n)))
                op_time += r.self_cpu_ms / n
        own = max(0.0, total - op_time)
        kernels.append(KernelStat("candidate code (outside torch operators)", own, 1))
    notes = []
    if result.passes:  # a training step: say which pass each kernel ran in
        for k in kernels:
            where = result.passes.get(k.name)
            k.name += f" [{'forward and backward' if where == 'both' else where}]" if where else ""
        notes.append("a training step was profiled: the forward, then the backward (kernels marked [backward]); "
                     "the problem's FLOPs and bytes, and the rates from them, are the forward's alone")
    return Profile(tool="torch", device=device_name, kernels=kernels, total_ms=total, notes=notes)
