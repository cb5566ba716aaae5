"""The CUDA clock times the kernels, not the host's launch path in front of them (however slow the host); the run
delay it reads says when the host was preempted."""

import os
import statistics
import subprocess
import sys
import threading
import time

import pytest

from kforge.backends.clocks import LAUNCH_PAD_US, CudaClock, RunDelay, l2_flush_bytes


def _slow_launch(x, host_us: float):
    """A call whose host side takes ``host_us`` before its one small kernel, as a Python launch path on a
    loaded host does."""
    def call():
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e6 < host_us:
            pass
        return x.relu_()
    return call


@pytest.mark.gpu
def test_a_slow_host_launch_path_is_not_timed():
    import torch
    clock = CudaClock(l2_flush_bytes())
    x = torch.randn(1 << 16, device="cuda")
    fast = [clock.time(lambda: x.relu_())[0] for _ in range(7)]
    # 150 us of host work: longer than the flush alone takes on an H100 (~0.11 ms), well within flush + pad
    slow = [clock.time(_slow_launch(x, 150.0))[0] for _ in range(7)]
    assert LAUNCH_PAD_US >= 200
    assert statistics.median(slow) < statistics.median(fast) + 0.03, (fast, slow)


@pytest.mark.gpu
def test_settled_calls_still_time_their_launch():
    """``settled`` (a candidate with streams of its own) waits for the flush before the start event: its host
    side is timed, as documented, and the pad does not hide it."""
    import torch
    clock = CudaClock(l2_flush_bytes())
    x = torch.randn(1 << 16, device="cuda")
    slow = [clock.time(_slow_launch(x, 300.0), settled=True)[0] for _ in range(5)]
    assert statistics.median(slow) > 0.25, slow


@pytest.mark.skipif(not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat"),
                    reason="this kernel keeps no schedstat")
def test_run_delay_counts_the_time_other_processes_had_the_core():
    delay = RunDelay()
    n = 2 * (os.cpu_count() or 1) + 1
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.5)  # the hogs are running
        before, t0 = delay.ms(), time.perf_counter()
        while time.perf_counter() - t0 < 1.0:  # spin: runnable all the time, on a core less than half of it
            pass
        waited = delay.ms() - before
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    assert waited > 0.3 * 1000  # ms; 2c+1 hogs and this thread on c cores: it waits over half the second
    other: list = []
    thread = threading.Thread(target=lambda: other.append(delay.ms()))
    thread.start()
    thread.join()
    assert other == [None]  # another thread's delay is not this one's


def test_run_delay_is_none_where_the_kernel_keeps_none(monkeypatch):
    def no_proc(*a, **k):
        raise FileNotFoundError("/proc")
    monkeypatch.setattr(os, "open", no_proc)
    assert RunDelay().ms() is None
