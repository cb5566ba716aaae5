"""Verdicts do not move with the machine's load: honest candidates verified while CPU hogs oversubscribe every core
get the states they get on a quiet machine (a cold `kforge eval` builds extensions beside its workers)."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.exploits.test_corpus import check

TESTS = Path(__file__).parents[1]


@contextlib.contextmanager
def cpu_hogs(n: int):
    """``n`` busy processes for the block's duration (each ended by its own id)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield hogs
    finally:
        for p in hogs:
            p.kill()
        for p in hogs:
            p.wait()


def states_quiet_and_loaded(pool, paths: list[Path], backend: str, size: str):
    quiet = {p.stem: check(pool, p, backend, size).states for p in paths}
    with cpu_hogs(2 * (os.cpu_count() or 2)) as hogs:
        loaded = {p.stem: check(pool, p, backend, size).states for p in paths}
        assert all(h.poll() is None for h in hogs)  # they were busy the whole time
    return quiet, loaded


def test_cpu_verdicts_are_the_same_beside_cpu_hogs(pool):
    paths = [TESTS / "idioms" / "cpu" / "h_getattr.py", TESTS / "idioms" / "cpu" / "d_dummy_launch.py"]
    quiet, loaded = states_quiet_and_loaded(pool, paths, "cpu", "cpu")
    assert quiet == loaded, (quiet, loaded)


@pytest.mark.gpu
def test_cuda_verdicts_are_the_same_beside_cpu_hogs(pool):
    """Issue 41: a plain fused kernel was `unsynchronized_work` while builds kept the CPUs busy; a kernel left on a
    side stream must stay accused."""
    paths = [TESTS / "idioms" / "cuda" / n for n in ("h_getattr.py", "h_pointer_args.py", "h_side_stream_joined.py",
                                                     "h_modelnew_alias.py")]
    paths.append(TESTS / "exploits" / "cuda" / "side_stream_runtime.py")
    quiet, loaded = states_quiet_and_loaded(pool, paths, "cuda", "gpu")
    assert quiet == loaded, (quiet, loaded)
