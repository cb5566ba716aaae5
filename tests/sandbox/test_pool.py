"""The worker pool's bookkeeping: eager start, and where requests spend their time."""

import threading
import time
import uuid
import warnings

import pytest

from kforge.backends import get_backend
from kforge.problems import resolve_problem
from kforge.sandbox.protocol import ProbeRequest
from kforge.verify import State, Verifier, WorkerPool
from tests.helpers import candidate, fast_config


def unremembered(source: str) -> str:
    """A program no earlier verification built (so its build phase runs: `kforge.verify.build_memo`)."""
    return f"# {uuid.uuid4().hex}\n{source}"


def test_start_boots_every_worker_at_once_and_later_requests_reuse_them_and_time_is_booked(cache_dir):
    # The session's build cache: a fresh one would compile torch's headers again (a minute on 2 cores).
    with WorkerPool(gpus=[], build_workers=2, cpu_workers=1, build_cache=cache_dir / "ext") as pool:
        pool.start(["build", "cpu"])
        preloads = pool.preloads()
        assert sorted(preloads) == ["build-0", "build-1", "cpu-0"]
        # The run worker preloads the compiler stack a sweep's compile references use; a build never needs it.
        assert "torch._dynamo" in preloads["cpu-0"], preloads
        assert preloads["build-0"] == preloads["build-1"] == ["torch.utils.cpp_extension"], preloads
        started = {k: t["start"] for k, t in pool.time_s.items()}
        assert set(started) == {"build", "cpu"} and all(s > 0 for s in started.values())
        relu = resolve_problem("level1/1_ReLU", size="cpu")
        verifier = Verifier(fast_config(), pool=pool)
        v = verifier.verify(relu, unremembered(candidate("cpu", "relu_ok.py")), "cpu")
        assert v.state is State.CORRECT, v.summary()
        # The verifier books its own sections; together they are the verification as the caller saw it.
        assert set(verifier.time_s) == {"checks", "build", "run", "after"}
        assert sum(verifier.time_s.values()) <= v.wall_s and verifier.time_s["run"] > verifier.time_s["checks"]
        # Nothing started again: the verification used the workers started above, and its time is booked.
        assert {k: t["start"] for k, t in pool.time_s.items()} == started
        assert pool.time_s["build"]["serve"] > 0 and pool.time_s["cpu"]["serve"] > 0
        assert sorted(pool.preloads()) == ["build-0", "build-1", "cpu-0"]


def test_one_request_at_a_time_reuses_the_started_worker_instead_of_starting_the_others(tmp_path):
    # Measured on an H200 host: a free but unstarted build slot picked before a started one cost 13 s
    # of worker start-up in each of a latency run's first verifications.
    with WorkerPool(gpus=[], build_workers=3, build_cache=tmp_path / "cache") as pool:
        for _ in range(3):
            reply = pool.request("build", ProbeRequest(backend=get_backend("cpu").spec()), {}, timeout=120)
            assert reply.result.device.startswith("cpu")
        assert list(pool.preloads()) == ["build-0"]
        assert pool.counters["build"] == 3


def test_a_free_slot_goes_to_the_longest_waiting_request_not_to_one_arriving_as_it_frees(tmp_path):
    # A loop arriving just as a slot came back used to take it ahead of loops already waiting: over a
    # sweep some problems raced ahead and the last ones finished alone, leaving devices idle.
    with WorkerPool(gpus=[], cpu_workers=1, build_cache=tmp_path / "cache") as pool:
        order = []
        held = pool.slot("cpu")
        held.__enter__()

        def waiter():
            with pool.slot("cpu"):
                order.append("waiting")

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.5)  # the waiter is queued for the slot by now
        held.__exit__(None, None, None)
        with pool.slot("cpu"):  # free at this instant, but the waiter asked first
            order.append("late")
        t.join(timeout=60)
        assert order == ["waiting", "late"]


def test_gpu_workers_warn_when_a_cuda_mps_daemon_would_serve_them(tmp_path, monkeypatch):
    """Under MPS a candidate's GPU fault reaches the spare beside it: say so before any worker starts."""
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    with WorkerPool(gpus=[0], root=tmp_path / "pool") as pool:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pool._env("cuda:0")  # no daemon listening: nothing to say
        (tmp_path / "control").touch()
        with pytest.warns(RuntimeWarning, match="CUDA MPS daemon is listening at .*workers.spare=false"):
            pool._env("cuda:0")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pool._env("cpu")  # CPU workers use no CUDA
    with WorkerPool(gpus=[0], root=tmp_path / "pool2", spare=False) as pool:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pool._env("cuda:0")  # no spare to lose


def test_a_light_pool_leaves_the_compiler_stack_to_the_children_and_still_verifies(cache_dir):
    # `kforge verify` runs one candidate: its workers skip importing dynamo, inductor and Triton up front.
    with WorkerPool(gpus=[], build_workers=1, build_cache=cache_dir / "ext", light=True) as pool:
        relu = resolve_problem("level1/1_ReLU", size="cpu")
        verifier = Verifier(fast_config(compile_ref=True), pool=pool)
        v = verifier.verify(relu, unremembered(candidate("cpu", "relu_ok.py")), "cpu")
        assert v.state is State.CORRECT and v.compile_ref is not None, v.summary()
        assert pool.preloads() == {"build-0": ["torch.utils.cpp_extension"], "cpu-0": ["torch.utils.cpp_extension"]}
        # With the audit cached, nothing imports torch._dynamo before the tripwire's snapshot; the compile
        # reference then imports it mid-verification, and what that import rebinds must not read as a patch.
        again = verifier.verify(relu, candidate("cpu", "relu_ok.py"), "cpu",
                                config=fast_config(compile_ref=True, compile_ref_reuse=False))
        assert again.state is State.CORRECT and "compile reference" in again.phases, again.summary()


def _start_in_background(pool: WorkerPool, kinds: list[str]) -> tuple[threading.Thread, list[BaseException]]:
    """`start` on a thread of its own, as `Verifier.start_workers` runs it, keeping what it raises."""
    errors: list[BaseException] = []

    def boot():
        try:
            pool.start(kinds)
        except BaseException as exc:  # noqa: BLE001 - the test asserts there is none
            errors.append(exc)

    thread = threading.Thread(target=boot)
    thread.start()
    return thread, errors


def test_a_pool_closed_before_its_background_boot_spawns_ends_that_boot_quietly(tmp_path):
    # Seen in CI (under tests/cli's `kforge verify` of a reply): the verification ended while the boot thread was
    # about to start a worker in the pool's directory, which `close` had removed: "Exception in thread
    # kforge-boot ... FileNotFoundError: /tmp/kforge-pool-...".
    pool = WorkerPool(gpus=[], cpu_workers=1, build_cache=tmp_path / "cache", light=True)
    reached, go = threading.Event(), threading.Event()
    env = pool._env
    pool._env = lambda kind: (reached.set(), go.wait(60), env(kind))[2]
    thread, errors = _start_in_background(pool, ["cpu"])
    assert reached.wait(60)
    pool.close()
    go.set()
    thread.join(60)
    assert not thread.is_alive() and errors == []
    with pytest.raises(RuntimeError, match="closed"):
        pool.request("cpu", ProbeRequest(backend=get_backend("cpu").spec()), {}, timeout=60)
    thread, errors = _start_in_background(pool, ["cpu"])  # a boot thread that only begins after the close
    thread.join(60)
    assert not thread.is_alive() and errors == []


def test_a_worker_that_finishes_starting_after_the_pool_closed_is_stopped(tmp_path, monkeypatch):
    # `close` stops the workers it knows of; one still in its handshake then was added afterwards and left running.
    from kforge.sandbox import pool as pool_module

    started, go = [], threading.Event()

    class SlowToGreet(pool_module.WorkerProcess):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)
            go.wait(60)  # the pool closes while this worker is still starting

    monkeypatch.setattr(pool_module, "WorkerProcess", SlowToGreet)
    pool = WorkerPool(gpus=[], cpu_workers=1, build_cache=tmp_path / "cache", light=True)
    thread, errors = _start_in_background(pool, ["cpu"])
    deadline = time.monotonic() + 120
    while not started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started, "the worker never started"
    pool.close()
    go.set()
    thread.join(60)
    assert not thread.is_alive() and errors == []
    assert started[0].proc.wait(timeout=30) is not None  # stopped, not left behind


def test_the_pools_folder_is_removed_though_a_dying_process_still_writes_there_for_a_moment(tmp_path):
    """SIGTERM to `kforge eval`: a candidate's process still wrote into the pool's folder while it was removed, and
    "Directory not empty" made the command exit 1 instead of 130 with its rows kept."""
    from kforge.sandbox.pool import WorkerPool

    class Busy:
        name, calls = str(tmp_path), 0

        def cleanup(self):
            self.calls += 1
            if self.calls < 3:
                raise OSError(39, "Directory not empty")

    pool = WorkerPool.__new__(WorkerPool)
    pool._tmp, pool.root = Busy(), tmp_path
    pool._remove_tmp()
    assert pool._tmp.calls == 3
    stuck = Busy()
    stuck.cleanup = lambda: (_ for _ in ()).throw(OSError(39, "Directory not empty"))
    pool._tmp = stuck
    pool._remove_tmp(tries=2)  # given up with a warning, not raised
