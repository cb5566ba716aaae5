"""The CUDA clock times the kernels, not the host's launch path in front of them (however slow the host)."""

import statistics
import time

import pytest

from kforge.backends.clocks import LAUNCH_PAD_US, CudaClock, l2_flush_bytes


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
