"""Clocks the candidate cannot reach (a backend picks one: `Backend.make_clock`).

Runs inside a worker's child. Every function a clock uses is captured when the clock is made, which
the worker does before any candidate code is imported: a candidate that later patches
``time.perf_counter``, ``torch.cuda.Event.elapsed_time`` or ``torch.cuda.synchronize`` changes
what it sees, not what the clock calls.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable


class CpuClock:
    """Host wall time around a call (device time and host time are the same thing on a CPU)."""

    device = "cpu"

    def __init__(self) -> None:
        self._perf = time.perf_counter

    def now(self) -> float:
        return self._perf()

    def sync(self) -> None:
        """Nothing is asynchronous on the CPU."""

    def flush(self) -> None:
        """CPU inputs are rotated between rounds instead of flushing the caches."""

    def time(self, fn: Callable[[], Any], settled: bool = False) -> tuple[float, float, Any]:
        t0 = self._perf()
        out = fn()
        t1 = self._perf()
        ms = (t1 - t0) * 1e3
        return ms, ms, out


class RunDelay:
    """The time the calling thread has spent runnable but waiting for a core (Linux's ``schedstat`` run delay).

    A host time holds every moment the scheduler gave the core to another process; this says how much of a call
    that was, so a call the host was preempted in can be told from one it was not. Read through a descriptor and
    ``os.pread`` captured when the clock is made; `ms` is None where the kernel does not keep the figure (no
    ``/proc``, no ``CONFIG_SCHED_INFO``) or on another thread than the one that made it.
    """

    def __init__(self) -> None:
        self._pread, self._tid_now = os.pread, threading.get_native_id
        self._tid = self._tid_now()
        try:
            self._fd: int | None = os.open(f"/proc/self/task/{self._tid}/schedstat", os.O_RDONLY)
            self._read()
        except (OSError, ValueError, IndexError):
            self._fd = None

    def _read(self) -> float:
        return int(self._pread(self._fd, 128, 0).split()[1]) / 1e6

    def ms(self) -> float | None:
        if self._fd is None or self._tid_now() != self._tid:
            return None
        try:
            return self._read()
        except (OSError, ValueError, IndexError):
            return None


LAUNCH_PAD_US = 250
"""After the L2 flush the device spins this long before the start event, so the host's launch path (up to the
flush plus this, ~0.35 ms on an H100) overlaps queued work instead of being timed. Measured on an H100: a Triton
GEMM's Python launch path took 110-200 us per call inside a worker (84 us in a plain process), more than the
200 MB flush (~0.11 ms); what leaked past the flush put 0.05-0.09 ms on a 0.18 ms kernel, by an amount that
moved with the host's load."""


class CudaClock:
    """CUDA events on the current stream, plus host time with a full device synchronize.

    The two disagree when work runs outside the timed stream (side streams, threads): the host time,
    which waits for the whole device, is the honest one, and the gap is evidence.
    """

    device = "cuda"

    def __init__(self, flush_bytes: int) -> None:
        import torch
        self._perf = time.perf_counter
        self._sync = torch._C._cuda_synchronize
        base = torch._C._CudaEventBase
        self._record, self._elapsed = base.record, base.elapsed_time
        self._stream = torch.cuda.current_stream()
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._zero = torch.Tensor.zero_
        self._flush_buf = torch.empty(int(flush_bytes), dtype=torch.uint8, device="cuda") if flush_bytes else None
        # a spin of ~LAUNCH_PAD_US (clock64 cycles at up to ~2 GHz: longer, never shorter, at lower clocks)
        self._spin = getattr(torch.cuda, "_sleep", None)
        self._pad_cycles = LAUNCH_PAD_US * 2000
        self.run_delay = RunDelay()

    def now(self) -> float:
        return self._perf()

    def sync(self) -> None:
        self._sync()

    def flush(self) -> None:
        """Overwrite a buffer larger than L2 so no input or weight is still cached (for untimed runs)."""
        if self._flush_buf is not None:
            self._zero(self._flush_buf)

    def time(self, fn: Callable[[], Any], settled: bool = False) -> tuple[float, float, Any]:
        """Time one call with L2 flushed first.

        The flush is queued, not waited for, before the start event (as triton's do_bench does), and a
        spin of `LAUNCH_PAD_US` after it: the GPU is still busy with them while the host makes the call,
        so the events time the kernels and not the Python launch path in front of them, however loaded
        the host. With no flush (``flush_l2`` off), the host's launch latency is included.
        ``settled`` waits for the flush before the start event, for a call that launches on a side stream
        of its own: such work waits for nothing on the timed stream, so it would otherwise run beside the
        flush, before the start event (the launch latency is then timed too, which only costs the call).
        Its host time then starts after the flush, so it holds the call's own work and nothing else.
        """
        self._sync()
        h0 = self._perf()
        if self._flush_buf is not None:
            self._zero(self._flush_buf)
            if not settled and self._spin is not None:
                self._spin(self._pad_cycles)
        if settled:
            self._sync()
            h0 = self._perf()
        self._record(self._start, self._stream)
        out = fn()
        self._record(self._end, self._stream)
        self._sync()
        h1 = self._perf()
        return self._elapsed(self._start, self._end), (h1 - h0) * 1e3, out


def l2_flush_bytes() -> int:
    """Four times the L2 cache of the current device, at least 64 MiB (KernelBench writes 256 MB)."""
    import torch
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 0) or 50 * 2**20
    return max(4 * l2, 64 * 2**20)


OPENCL_QUEUES: dict[int, Any] = {}
"""Every OpenCL command queue the candidate's launches and copies used (``id`` -> queue), registered by the
recorder's OpenCL hooks (`kforge.sandbox.opencl_hooks`); held for the process, which serves one candidate."""


class OpenClClock(CpuClock):
    """Host wall time around a call, every OpenCL queue the candidate used finished before the clock stops.

    The candidate's tensors are on the CPU and its kernels run on an OpenCL device (PoCL's threads, or a GPU
    through its vendor's OpenCL): work it leaves queued when its forward returns is still its work, so the
    clock waits for it. ``CommandQueue.finish`` is captured when the clock is made, before candidate code loads.
    """

    def __init__(self) -> None:
        super().__init__()
        import pyopencl._cl as _cl
        self._finish = _cl.CommandQueue.finish
        self._queues = OPENCL_QUEUES

    def sync(self) -> None:
        for queue in list(self._queues.values()):
            self._finish(queue)

    def time(self, fn: Callable[[], Any], settled: bool = False) -> tuple[float, float, Any]:
        t0 = self._perf()
        out = fn()
        self.sync()
        ms = (self._perf() - t0) * 1e3
        return ms, ms, out
