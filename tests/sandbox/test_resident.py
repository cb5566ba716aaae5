"""Resident workers: a pool's worker outlives it for the next pool, serves one pool at a time, and leaves when
idle."""

import os
import signal
import time
import uuid

import pytest

from kforge.backends import get_backend
from kforge.sandbox import resident
from kforge.sandbox.pool import ResidentWorker, WorkerPool
from kforge.sandbox.protocol import ProbeRequest

PROBE = ProbeRequest(backend=get_backend("cpu").spec())


@pytest.fixture
def own_env(monkeypatch):
    """A variable of this test's own, so its resident workers are no other test's (the environment is in the key)."""
    monkeypatch.setenv("KFORGE_TEST_RESIDENT", uuid.uuid4().hex)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def worker(pool: WorkerPool):
    (z,) = pool._all
    return z


def test_the_next_pool_finds_the_worker_the_last_one_left(own_env, cache_dir):
    with WorkerPool(gpus=[], build_cache=cache_dir / "ext", resident=60) as first:
        assert first.request("cpu", PROBE, {}, timeout=120).result.device.startswith("cpu")
        z = worker(first)
        assert isinstance(z, ResidentWorker)
        pid = z.pid
    try:
        assert alive(pid)  # the pool closed; its worker stays
        t0 = time.monotonic()
        with WorkerPool(gpus=[], build_cache=cache_dir / "ext", resident=60) as second:
            assert second.request("cpu", PROBE, {}, timeout=120).result.device.startswith("cpu")
            assert worker(second).pid == pid and second.time_s["cpu"]["start"] < 1.0, second.time_s
            # A pool arriving while another holds it starts a private worker instead of waiting.
            with WorkerPool(gpus=[], build_cache=cache_dir / "ext", resident=60) as third:
                assert third.request("cpu", PROBE, {}, timeout=120).result.device.startswith("cpu")
                assert not isinstance(worker(third), ResidentWorker) and worker(third).pid != pid
        assert time.monotonic() - t0 < 60
    finally:
        os.kill(pid, signal.SIGKILL)


def test_an_idle_resident_worker_leaves_and_takes_its_socket(own_env, cache_dir, monkeypatch):
    with WorkerPool(gpus=[], build_cache=cache_dir / "ext", resident=1.5) as pool:
        pool.request("cpu", PROBE, {}, timeout=120)
        pid = worker(pool).pid
        socket = resident.directory() / f"{resident.key(pool._env('cpu') | _kinds(), 'cpu-0')}.sock"
        assert socket.exists()
    sockets = lambda: [socket] if socket.exists() else []  # noqa: E731
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid) and not sockets()


def _kinds():
    from kforge.sandbox import dispatch
    return dispatch.to_env(dispatch.registered())


def test_the_socket_directory_is_private():
    d = resident.directory()
    assert d is not None and (d.stat().st_mode & 0o777) == 0o700 and d.stat().st_uid == os.getuid()
