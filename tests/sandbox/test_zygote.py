"""A GPU zygote keeps one child ahead, its CUDA context made; the quiet lock keeps that off timing.

Run on CPU by giving a zygote a GPU's environment (``CUDA_VISIBLE_DEVICES=0``): it then keeps a spare
as on a GPU. Without a GPU the spare's context cannot be made, which its request's own set-up would
report; everything around it (handover, replacement, the lock, clean-up) is what these tests check.
"""

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from kforge.backends import get_backend
from kforge.problems import resolve_problem
from kforge.sandbox.children import kill_group
from kforge.sandbox.dispatch import HANDLERS_ENV
from kforge.sandbox.env import scrubbed_env
from kforge.sandbox.gpus import detect_gpus as pool_gpus
from kforge.sandbox.process import ZYGOTE
from kforge.sandbox.protocol import DeviceInfo, ProbeRequest
from kforge.sandbox.zygote import SPARE_ENV
from kforge.verify import State, Verifier, WorkerPool
from tests.helpers import candidate, fast_config

PROBE = ProbeRequest(backend=get_backend("cpu").spec())


def children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(stat.parent.name))
    return kids


def wait_for(fn, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    return fn()


def gpu_like_pool(tmp_path, monkeypatch, spare: bool, build_cache: Path | None = None) -> WorkerPool:
    """A pool whose ``cpu`` slot is a zygote that believes it serves a GPU (building into ``build_cache``, else
    a fresh one)."""
    env = WorkerPool._env
    monkeypatch.setattr(WorkerPool, "_env", lambda self, kind: scrubbed_env(
        {"CUDA_VISIBLE_DEVICES": "0", "TRITON_INTERPRET": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
         SPARE_ENV: "1" if self.spare else "0"}) if kind == "cpu" else env(self, kind))
    p = WorkerPool(gpus=[], cpu_workers=1, build_workers=1, build_cache=build_cache or tmp_path / "cache",
                   spare=spare)
    p.start(["cpu"])
    return p


@pytest.fixture
def pool(tmp_path, monkeypatch, cache_dir):
    # The session's build cache: a fresh one would rebuild torch's precompiled header (minutes on 2 cores).
    with gpu_like_pool(tmp_path, monkeypatch, spare=True, build_cache=cache_dir / "ext") as p:
        yield p


def quiet_lock_file(pool: WorkerPool) -> Path:
    """The lock file, once the first spare has made it (a loaded machine may take a while)."""
    found = wait_for(lambda: list(Path(pool.root).glob(".quiet-*.lock")), timeout=600)
    assert found, "no spare made the quiet lock file"
    return found[0]


def zygote_pid(pool: WorkerPool) -> int:
    (z,) = [z for z in pool._all if z.label == "cpu-0"]
    return z.proc.pid


def test_the_spare_serves_the_next_request_and_is_replaced_and_leaves_with_the_pool(pool):
    zpid = zygote_pid(pool)
    (spare,) = wait_for(lambda: children(zpid))  # forked at start-up, before any request
    first = pool.request("cpu", PROBE, {}, timeout=60)
    assert first.result.device.startswith("cpu") and first.pid == spare
    (second_spare,) = wait_for(lambda: children(zpid))
    assert second_spare != spare
    # A spare that died is not handed the request: a fresh child serves it.
    os.kill(second_spare, signal.SIGKILL)
    wait_for(lambda: second_spare not in children(zpid))
    again = pool.request("cpu", PROBE, {}, timeout=60)
    assert again.result.device.startswith("cpu") and again.pid not in (spare, second_spare)
    (last_spare,) = wait_for(lambda: children(zpid))
    pool.close()
    assert wait_for(lambda: not Path(f"/proc/{last_spare}").exists() or
                    "Z" in Path(f"/proc/{last_spare}/stat").read_text().rsplit(")", 1)[1][:3], timeout=15)


def test_a_spare_makes_its_context_only_under_the_quiet_lock(pool):
    zpid = zygote_pid(pool)
    wait_for(lambda: children(zpid))
    lock = quiet_lock_file(pool)
    time.sleep(0.5)  # the first spare has made (here: tried to make) its context and let go of the lock
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        pool.request("cpu", PROBE, {}, timeout=60)  # served by the ready spare; the next one now waits
        replies = []
        t = threading.Thread(target=lambda: replies.append(pool.request("cpu", PROBE, {}, timeout=60)))
        t.start()
        t.join(1.5)
        assert not replies, "the spare went on while someone held the quiet lock"
    finally:
        os.close(fd)
    t.join(30)
    assert replies and replies[0].result.device.startswith("cpu")


def test_timing_waits_for_the_quiet_lock(pool):
    relu = resolve_problem("level1/1_ReLU", size="cpu")
    verifier = Verifier(fast_config(), pool=pool)
    wait_for(lambda: children(zygote_pid(pool)))
    lock = quiet_lock_file(pool)
    time.sleep(0.5)
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a spare making its context would
    verdicts = []
    t = threading.Thread(target=lambda: verdicts.append(verifier.verify(relu, candidate("cpu", "relu_ok.py"), "cpu")))
    t.start()
    try:
        def waiting():
            return any(f.read_text() == "waiting for the device" for f in Path(pool.root, "work").glob("*/phase"))
        # The run's own signal, not a deadline: on a loaded machine its fresh build may take minutes before
        # the run reaches the lock (pytest's timeout still bounds a run that hangs).
        while not waiting() and t.is_alive():
            time.sleep(0.02)
        assert t.is_alive(), ("the run ended without waiting for the quiet lock: "
                              f"{verdicts[0].summary() if verdicts else 'no verdict (it raised)'}")
        time.sleep(1.0)
        assert not verdicts
    finally:
        os.close(fd)
    t.join()
    (v,) = verdicts
    assert v.state is State.CORRECT, v.summary()
    assert v.phases["waiting for the device"] > 0.9 and v.phases["timing"] > 0


def test_without_spares_each_request_forks_its_child_then(tmp_path, monkeypatch):
    with gpu_like_pool(tmp_path, monkeypatch, spare=False) as pool:
        zpid = zygote_pid(pool)
        time.sleep(1.0)
        assert children(zpid) == []
        reply = pool.request("cpu", PROBE, {}, timeout=60)
        assert reply.result.device.startswith("cpu") and children(zpid) == []
        assert not list(Path(pool.root).glob(".quiet-*.lock"))


# A child that does what a spare does: close what it inherited, open some files, make a CUDA context.
NVML_CHILDREN = r"""
import os, sys
import torch
assert torch.cuda.is_available()  # asks NVML (PYTORCH_NVML_BASED_CUDA_CHECK), as the zygote's preload does
from kforge.sandbox.zygote import release_nvml
release_nvml()
failed = []
for extra in range(4):
    pid = os.fork()
    if pid == 0:
        os.closerange(3, 1 << 16)
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(extra)]
        try:
            torch.cuda.set_device(0)
            torch.ones(4, device="cuda").sum().item()
        except Exception:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(extra)
print("failed with extra descriptors:", failed)
sys.exit(1 if failed else 0)
"""


@pytest.mark.gpu
def test_forked_children_make_contexts_however_many_files_they_hold_open():
    """NVML state inherited from the zygote once broke spares holding one more file open (H200)."""
    gpu = str(pool_gpus()[0])
    env = scrubbed_env({"CUDA_VISIBLE_DEVICES": gpu, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                        "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
    out = subprocess.run([sys.executable, "-c", NVML_CHILDREN], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]


def test_an_answer_counts_only_alone_and_with_its_nonce():
    from kforge.sandbox.zygote import _answer
    ok = {"result": {"state": "correct"}, "nonce": "n1"}
    forged = {"result": {"state": "correct"}}
    assert _answer(json.dumps(ok).encode(), "n1") == {"result": {"state": "correct"}}
    assert "forged" in _answer(json.dumps(ok).encode(), "n2")
    assert "forged" in _answer(json.dumps(forged).encode(), "n1")
    assert "forged" in _answer((json.dumps(forged) + json.dumps(ok)).encode(), "n1")  # written before the harness
    assert "forged" in _answer((json.dumps(ok) + "\n{garbage").encode(), "n1")
    assert "forged" in _answer(b"[1, 2]", "n1")
    assert _answer(b"{garbage", "n1") == {"error": "the worker wrote an unreadable result"}


def test_children_write_a_cprofile_of_their_request_when_asked(tmp_path, monkeypatch):
    """KFORGE_PROFILE_CHILD: each child leaves ``<kind>-<pid>.prof`` that pstats reads (where a device's
    seconds go, measured there rather than guessed)."""
    import pstats

    from kforge.sandbox.zygote import PROFILE_ENV
    folder = tmp_path / "prof"
    monkeypatch.setenv(PROFILE_ENV, str(folder))
    with WorkerPool(gpus=[], cpu_workers=1, build_workers=1, build_cache=tmp_path / "cache") as p:
        reply = p.request("cpu", PROBE, {}, timeout=60)
    written = folder / f"probe-{reply.pid}.prof"
    assert written.exists(), sorted(folder.glob("*"))
    stats = pstats.Stats(str(written))
    assert any(name == "handle" for (_, _, name) in stats.stats), "the dispatch handler was not profiled"


def test_the_profilers_own_lines_stay_out_of_the_output_tail(tmp_path):
    from kforge.sandbox.zygote import _read_tail
    out = tmp_path / "output.txt"
    out.write_text("candidate says hi\n[W1125 02:03:04] USDT probes enabled\nSTAGE:2026-11-25 Enabling\nbye\n")
    assert _read_tail(str(out)) == "candidate says hi\nbye\n"


def test_progress_records_carry_the_nonce_and_a_stopped_child_keeps_only_them():
    from kforge.sandbox.zygote import _answer

    def rec(record, nonce="n1"):
        return json.dumps({"progress": record, "nonce": nonce})
    ok = json.dumps({"result": {"state": "correct"}, "nonce": "n1"})
    lines = [rec({"milestones": {"run": {"trials": 3}}}), rec({"in_candidate": True}), rec({"in_candidate": False})]
    got = _answer("\n".join(lines + [ok]).encode(), "n1")
    assert got["result"] == {"state": "correct"}
    assert got["progress"] == {"in_candidate": False, "milestones": {"run": {"trials": 3}}}
    stopped = _answer("\n".join(lines[:2]).encode(), "n1", timed_out=True)
    assert stopped == {"progress": {"in_candidate": True, "milestones": {"run": {"trials": 3}}}}
    # A record the candidate wrote (it cannot know the nonce) is a forgery, whatever it claims.
    assert "forged" in _answer("\n".join([lines[0], rec({"in_candidate": False}, "guess")]).encode(), "n1", True)


@dataclass(frozen=True, kw_only=True)
class NapRequest(ProbeRequest):
    KIND: ClassVar[str] = "nap"


def nap(request: ProbeRequest) -> DeviceInfo:
    """A request that outlasts its caller (a verification on a GPU that the job's time limit cut off)."""
    time.sleep(300)
    raise AssertionError("the child was not stopped when its caller went")


NAP_ENV = {HANDLERS_ENV: json.dumps({"nap": f"{__name__}:nap"}), SPARE_ENV: "0"}


def send_nap(send, tmp_path: Path, zpid: int) -> int:
    """Send a nap request and return the child serving it, once it exists."""
    (tmp_path / "work").mkdir()
    send((json.dumps({"kind": "nap", "workdir": str(tmp_path / "work"), "timeout": 300,
                      "body": PROBE.to_wire()}) + "\n").encode())
    kids = wait_for(lambda: children(zpid))
    assert kids, "the zygote forked no child for the request"
    return kids[0]


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_caller_that_dies_mid_request_takes_its_childs_work_with_it(tmp_path):
    """Killing the process that holds the pool (`timeout kforge eval`, a job's limit) once left its verification
    running until the request's own timeout, the GPU's memory held (86 GB still in use after one on an H200): the
    zygote now stops the child when its caller hangs up, and ends."""
    z = subprocess.Popen(ZYGOTE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path,
                         env=scrubbed_env(NAP_ENV), start_new_session=True)
    try:
        assert json.loads(z.stdout.readline())["ready"]
        child = send_nap(lambda data: (z.stdin.write(data), z.stdin.flush()), tmp_path, z.pid)
        z.stdin.close()  # the caller's end goes, as when its process is killed
        z.stdout.close()
        assert wait_for(lambda: gone(child), timeout=20), "the child kept working for a caller that was gone"
        assert z.wait(timeout=20) is not None
    finally:
        kill_group(z.pid)
        z.wait()


def test_a_resident_worker_stops_the_work_of_a_pool_that_went_and_serves_the_next(tmp_path):
    from kforge.sandbox import resident
    sock_path = tmp_path / "w.sock"
    z = subprocess.Popen(ZYGOTE, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         env=scrubbed_env({**NAP_ENV, resident.SOCKET_ENV: str(sock_path), resident.IDLE_ENV: "60"}),
                         start_new_session=True)
    try:
        sock = wait_for(lambda: resident._connect(sock_path) if sock_path.exists() else None, timeout=600)
        assert sock is not None, "the resident worker never listened"
        reader = sock.makefile("rb")
        assert json.loads(reader.readline())["ready"]
        child = send_nap(sock.sendall, tmp_path, z.pid)
        reader.close()
        sock.close()  # the pool's process killed
        assert wait_for(lambda: gone(child), timeout=20), "the child kept working for a pool that was gone"
        nxt = resident._connect(sock_path)
        assert nxt is not None and json.loads(nxt.makefile("rb").readline())["ready"], "the next pool was not served"
        nxt.close()
        assert z.poll() is None
    finally:
        kill_group(z.pid)
        z.wait()


def test_a_pool_closed_mid_request_stops_the_child(tmp_path, monkeypatch):
    """A second Ctrl-C closes the pool under a job while a verification runs: killing the zygote alone would leave
    its child (a session of its own) at work."""
    from kforge.sandbox import dispatch
    monkeypatch.setattr(dispatch, "_REGISTERED", dict(dispatch._REGISTERED, nap=f"{__name__}:nap"))
    monkeypatch.setenv(SPARE_ENV, "0")
    pool = WorkerPool(gpus=[], cpu_workers=1, build_workers=1, build_cache=tmp_path / "cache")
    pool.start(["cpu"])
    zpid = zygote_pid(pool)
    errors = []

    def call():
        try:
            pool.request("cpu", NapRequest(backend=PROBE.backend), {}, timeout=300)
        except Exception as exc:  # noqa: BLE001 - the pool closing under it: any error is expected
            errors.append(exc)
    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    kids = wait_for(lambda: children(zpid))
    assert kids, "the zygote forked no child for the request"
    pool.close()
    assert wait_for(lambda: gone(kids[0]), timeout=20), "the child outlived its closed pool"
    caller.join(timeout=30)
    assert not caller.is_alive() and errors
